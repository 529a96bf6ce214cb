"""The service's live events read on a QThread and re-emitted as Qt signals."""

from __future__ import annotations

import threading

from PySide6.QtCore import QObject, QThread, Signal

from app.api_types import ServiceEvent
from app.client import ControlError, EventStream, ServiceAddress, ServiceUnavailable

STOP_WAIT_MS = 5000


class EventStreamThread(QThread):
    """Iterates the service's `EventStream` off the GUI thread until the stream ends or `stop()` is called."""

    sig_snapshot_received = Signal(object)  # list of model records
    sig_engine_changed = Signal(object)  # an engine event
    sig_log_received = Signal(str, str)  # model id, line
    sig_download_changed = Signal(object)  # a download's record: state, bytes, rate, time left
    sig_sample_received = Signal(object)  # a metrics sample: {t, points: [[name, labels, value], ...]}
    sig_bench_changed = Signal(object)  # a benchmark run's state, as GET /api/bench gives it
    sig_quality_changed = Signal(object)  # a quality run's state, as GET /api/quality gives it
    sig_engine_build_changed = Signal(object)  # an engine build's state, as GET /api/engines/builds gives it
    sig_stream_ended = Signal(str)  # why, in words; not emitted after stop()

    def __init__(self, address: ServiceAddress, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._events = EventStream(address)
        self._stopping = threading.Event()

    def run(self) -> None:
        try:
            for event in self._events:
                if self._stopping.is_set():
                    return
                self._dispatch(event)
            reason = "The service closed its event stream."
        except (ServiceUnavailable, ControlError) as exc:  # ControlError: a state this window does not know
            reason = str(exc)
        except (ValueError, KeyError, TypeError):
            reason = "The service sent an event that could not be read."
        if not self._stopping.is_set():
            self.sig_stream_ended.emit(reason)

    def _dispatch(self, event: ServiceEvent) -> None:
        if event["type"] == "snapshot":
            self.sig_snapshot_received.emit(event["models"])
        elif event["type"] == "engine":
            self.sig_engine_changed.emit(event)
        elif event["type"] == "download":
            self.sig_download_changed.emit(event["download"])
        elif event["type"] == "log":
            self.sig_log_received.emit(event["model_id"], event["line"])
        elif event["type"] == "sample":
            self.sig_sample_received.emit(event)
        elif event["type"] == "bench":
            self.sig_bench_changed.emit(event["run"])
        elif event["type"] == "quality":
            self.sig_quality_changed.emit(event["run"])
        elif event["type"] == "engine_build":
            self.sig_engine_build_changed.emit(event["build"])

    def stop(self) -> bool:
        """End the stream and wait (bounded) for the thread; True when it has finished."""
        self._stopping.set()
        self._events.close()
        return self.wait(STOP_WAIT_MS)
