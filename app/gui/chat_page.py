"""A small chat page to try a model: streamed answers with stop, clear, a system prompt, TTFT and tokens/s."""

from __future__ import annotations

import time
from typing import Any

from PySide6.QtCore import QObject, QThread, Signal, Slot
from PySide6.QtGui import QTextCursor
from PySide6.QtWidgets import (
    QComboBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.api_types import EndpointRecord
from app.client import ChatStream, ControlError, ServiceUnavailable, stream_chat

MAX_TOKENS = 512


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


class ChatPage(QWidget):
    """Pick a model, write a prompt, read the streamed answer. Reaches the endpoint only through app.client."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._endpoint: EndpointRecord | None = None
        self._history: list[dict[str, str]] = []
        self._thread: ChatStreamThread | None = None
        self._answer = ""
        self._started = 0.0
        self._first_at: float | None = None
        self._chunks = 0
        self.model_combo = QComboBox()
        self.model_combo.setAccessibleName("Model to chat with")
        self.system_edit = QLineEdit("You are a helpful assistant.")
        self.system_edit.setAccessibleName("System prompt")
        self.transcript = QPlainTextEdit()
        self.transcript.setReadOnly(True)
        self.transcript.setAccessibleName("Chat transcript")
        self.prompt_edit = QLineEdit()
        self.prompt_edit.setPlaceholderText("Ask something and press Enter")
        self.prompt_edit.setAccessibleName("Your message")
        self.send_button = QPushButton("&Send")
        self.stop_button = QPushButton("S&top")
        self.clear_button = QPushButton("C&lear")
        self.send_button.setAccessibleName("Send the message")
        self.stop_button.setAccessibleName("Stop the answer")
        self.clear_button.setAccessibleName("Clear the conversation")
        self.stats_label = QLabel("")
        self.stats_label.setAccessibleName("Speed of the last answer")
        self._build_layout()
        self.send_button.clicked.connect(self._on_send_button_clicked)
        self.prompt_edit.returnPressed.connect(self._on_send_button_clicked)
        self.stop_button.clicked.connect(self._on_stop_button_clicked)
        self.clear_button.clicked.connect(self._on_clear_button_clicked)
        self._set_streaming(False)

    def _build_layout(self) -> None:
        form = QFormLayout()
        form.addRow("&Model:", self.model_combo)
        form.addRow("S&ystem prompt:", self.system_edit)
        buttons = QHBoxLayout()
        buttons.addWidget(self.prompt_edit, 1)
        buttons.addWidget(self.send_button)
        buttons.addWidget(self.stop_button)
        buttons.addWidget(self.clear_button)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.transcript, 1)
        layout.addLayout(buttons)
        layout.addWidget(self.stats_label)

    @property
    def is_streaming(self) -> bool:
        return self._thread is not None

    def set_endpoint(self, info: EndpointRecord) -> None:
        self._endpoint = info

    def set_models(self, models: list[dict[str, Any]]) -> None:
        """Offer every model the service knows; the gateway answers for one that is not running yet."""
        current = self.model_combo.currentText()
        ids = [str(model["id"]) for model in models]
        if ids == [self.model_combo.itemText(i) for i in range(self.model_combo.count())]:
            return
        self.model_combo.clear()
        self.model_combo.addItems(ids)
        if current in ids:
            self.model_combo.setCurrentText(current)

    def send(self, text: str) -> None:
        """Send `text` as the next user message and stream the answer into the transcript."""
        model_id = self.model_combo.currentText()
        if self.is_streaming or not text.strip() or not model_id or self._endpoint is None:
            return
        self._history.append({"role": "user", "content": text})
        messages = [{"role": "system", "content": self.system_edit.text()}] if self.system_edit.text() else []
        stream = stream_chat(self._endpoint, model_id, messages + self._history, MAX_TOKENS)
        self._append(f"You: {text}\n\n{model_id}: ")
        self._answer, self._chunks, self._first_at = "", 0, None
        self._started = time.perf_counter()
        thread = self._thread = ChatStreamThread(stream, self)
        thread.sig_delta_received.connect(self._on_thread_delta_received)
        thread.sig_stream_failed.connect(self._on_thread_stream_failed)
        thread.finished.connect(self._on_thread_finished)
        self._set_streaming(True)
        self.stats_label.setText("Waiting for the first token\N{HORIZONTAL ELLIPSIS}")
        thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._thread.stream.cancel()

    def wait_stopped(self, timeout_ms: int = 5000) -> bool:
        """Used when the window closes: a stream thread must not outlive its page."""
        if self._thread is None:
            return True
        self._thread.stream.cancel()
        return self._thread.wait(timeout_ms)

    def _append(self, text: str) -> None:
        cursor = self.transcript.textCursor()
        cursor.movePosition(QTextCursor.MoveOperation.End)
        cursor.insertText(text)
        self.transcript.setTextCursor(cursor)

    def _set_streaming(self, streaming: bool) -> None:
        self.send_button.setEnabled(not streaming)
        self.stop_button.setEnabled(streaming)
        self.clear_button.setEnabled(not streaming)

    @Slot()
    def _on_send_button_clicked(self) -> None:
        text = self.prompt_edit.text()
        self.prompt_edit.clear()
        self.send(text)

    @Slot()
    def _on_stop_button_clicked(self) -> None:
        self.stop()

    @Slot()
    def _on_clear_button_clicked(self) -> None:
        self._history.clear()
        self.transcript.clear()
        self.stats_label.clear()

    @Slot(str)
    def _on_thread_delta_received(self, delta: str) -> None:
        if self._first_at is None:
            self._first_at = time.perf_counter()
        self._chunks += 1
        self._answer += delta
        self._append(delta)

    @Slot(str)
    def _on_thread_stream_failed(self, message: str) -> None:
        self._append(f"\n[{message}]")

    @Slot()
    def _on_thread_finished(self) -> None:
        thread, self._thread = self._thread, None
        stopped = thread is not None and thread.stream.cancelled
        if self._answer:
            self._history.append({"role": "assistant", "content": self._answer})
        self._append(" [stopped]\n\n" if stopped else "\n\n")
        self.stats_label.setText(self._stats_text())
        self._set_streaming(False)
        if thread is not None:
            thread.deleteLater()

    def _stats_text(self) -> str:
        return speed_text(self._started, self._first_at, self._chunks, time.perf_counter())


def speed_text(started: float, first_at: float | None, chunks: int, now: float) -> str:
    """TTFT and tokens/s of one streamed answer, from perf_counter times and its count of content chunks."""
    if first_at is None:
        return "No answer."
    ttft_ms = (first_at - started) * 1000
    # llama.cpp and vLLM stream one token per content chunk, so chunks after the first count tokens.
    elapsed = now - first_at
    rate = f"{(chunks - 1) / elapsed:.1f} tokens/s" if chunks > 1 and elapsed > 0 else "- tokens/s"
    return f"TTFT {ttft_ms:.0f} ms, {rate}, {chunks} tokens"
