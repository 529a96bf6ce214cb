"""One chat answer streamed off the GUI thread, and the line that says how fast it came: what the chat page and
the Run page's "Test it" share."""

from __future__ import annotations

from PySide6.QtCore import QObject, QThread, Signal

from app.client import ChatStream, ControlError, ServiceUnavailable


class ChatStreamThread(QThread):
    """Reads one ChatStream off the GUI thread, so a slow model never freezes the window."""

    sig_delta_received = Signal(str)
    sig_stream_failed = Signal(str)

    def __init__(self, stream: ChatStream, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.stream = stream

    def run(self) -> None:
        try:
            for delta in self.stream:
                self.sig_delta_received.emit(delta)
        except (ServiceUnavailable, ControlError, ValueError) as exc:
            self.sig_stream_failed.emit(str(exc))


def speed_text(started: float, first_at: float | None, chunks: int, now: float) -> str:
    """TTFT and tokens/s of one streamed answer, from perf_counter times and its count of content chunks."""
    if first_at is None:
        return "No answer."
    ttft_ms = (first_at - started) * 1000
    # llama.cpp and vLLM stream one token per content chunk, so chunks after the first count tokens.
    elapsed = now - first_at
    rate = f"{(chunks - 1) / elapsed:.1f} tokens/s" if chunks > 1 and elapsed > 0 else "- tokens/s"
    return f"TTFT {ttft_ms:.0f} ms, {rate}, {chunks} tokens"
