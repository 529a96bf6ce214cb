"""The window's link to the service: connects or starts it, runs every blocking call off the GUI thread,
relays live events as signals, restarts the service (new ports or address), and on close shuts down the service
it started, or leaves it running when asked to."""

from __future__ import annotations

import enum
import functools
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from PySide6.QtCore import QObject, QThreadPool, QTimer, Signal, Slot

from app.api_types import EndpointRecord, ModelRecord, SettingsAnswer
from app.client import ControlClient, ControlError, ServiceUnavailable, connect, start_service
from app.gui.connection.event_stream import EventStreamThread
from app.gui.connection.service_shutdown import check_new_ports, shut_down_other_service, shut_down_service
from app.paths import AppPaths

T = TypeVar("T")

NOT_CONNECTED = "Not connected to the ModelDeck service."

POLL_INTERVAL_MS = 1000
POOL_DRAIN_MS = 5000


class Phase(enum.Enum):
    """Where the connection stands."""

    IDLE = "idle"
    CONNECTING = "connecting"
    CONNECTED = "connected"
    LOST = "lost"
    CLOSING = "closing"
    CLOSED = "closed"


@dataclass(frozen=True)
class _Opened:
    client: ControlClient
    process: subprocess.Popen[bytes] | None  # set when this window started the service


class ServiceConnection(QObject):
    """Owns the control client, the event stream thread and the calls in flight; emits what to show."""

    sig_status_changed = Signal(str)  # the connection's state, in words
    sig_error_occurred = Signal(str)  # something failed, in words
    sig_models_received = Signal(object)  # a snapshot: list of model records
    sig_usage_received = Signal(object)  # a poll: list of model records (memory, pid, restarts)
    sig_engine_changed = Signal(object)  # an engine event
    sig_model_call_ended = Signal(str)  # model id: a start or stop call was answered or failed
    sig_log_received = Signal(str, str)  # model id, line
    sig_sample_received = Signal(object)  # a metrics sample, once a second: {t, points}
    sig_logs_loaded = Signal(str, object)  # model id, list of the latest lines
    sig_download_changed = Signal(object)  # a download's record, as GET /api/downloads lists them
    sig_endpoint_received = Signal(object)  # {url, api_key, key_source, key_note}
    sig_bench_changed = Signal(object)  # the running (or last) benchmark's state, live from `bench` events
    sig_quality_changed = Signal(object)  # the running (or last) quality run's state, from `quality` events
    sig_engine_build_changed = Signal(object)  # the running (or last) engine build, from `engine_build` events
    sig_connection_closed = Signal()
    sig_settings_received = Signal(object)  # GET /api/settings: {settings, running, restart_required, ...}
    sig_settings_saved = Signal(object)  # the same, after a save, with `changed`
    sig_settings_refused = Signal(str)  # why a save was refused (a bad value, LAN exposure without a key)
    sig_hf_token_changed = Signal(bool)  # whether a Hugging Face token is now saved
    sig_service_restarted = Signal()
    # Internal: a worker's result, as a callable to run on the GUI thread (queued across threads).
    sig_call_done = Signal(object)

    def __init__(self, paths: AppPaths, port: int | None = None, parent: QObject | None = None) -> None:
        """`port`: the endpoint port of a service this connection starts (None: the saved settings decide)."""
        super().__init__(parent)
        self._paths = paths
        self._port = port
        self._phase = Phase.IDLE
        self._client: ControlClient | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._stream: EventStreamThread | None = None
        self._pool = QThreadPool(self)
        self._poll_in_flight = False
        self._settings_saves_asked = 0
        self._settings_saves_answered = 0
        self._stop_service: bool | None = None
        self._poll_timer = QTimer(self)
        self._poll_timer.setInterval(POLL_INTERVAL_MS)
        self._poll_timer.timeout.connect(self._on_poll_timer_timeout)
        self.sig_call_done.connect(self._on_call_done)

    @property
    def paths(self) -> AppPaths:
        """Where this ModelDeck keeps its files (the window keeps a little state there too)."""
        return self._paths

    @property
    def phase(self) -> Phase:
        return self._phase

    @property
    def is_connected(self) -> bool:
        return self._phase is Phase.CONNECTED

    @property
    def is_closed(self) -> bool:
        return self._phase is Phase.CLOSED

    @property
    def _closing_or_closed(self) -> bool:
        return self._phase in (Phase.CLOSING, Phase.CLOSED)

    @property
    def started_service(self) -> bool:
        """True when this connection started the service (and so stops it on close)."""
        return self._process is not None

    @property
    def service_process(self) -> subprocess.Popen[bytes] | None:
        return self._process

    @property
    def client(self) -> ControlClient | None:
        return self._client

    # Off-thread calls ------------------------------------------------------------------------------------

    def _submit(self, job: Callable[[], T], on_done: Callable[[T], None], on_failed: Callable[[str], None]) -> None:
        self._pool.start(functools.partial(self._run_call, job, on_done, on_failed))

    def _run_call(self, job: Callable[[], T], on_done: Callable[[T], None], on_failed: Callable[[str], None]) -> None:
        """Runs on a pool thread; hands the outcome to the GUI thread through a queued signal."""
        try:
            result = job()
        except (ServiceUnavailable, ControlError, OSError) as exc:
            self.sig_call_done.emit(functools.partial(on_failed, str(exc)))
            return
        except Exception as exc:  # a pool thread has no caller to raise to: the GUI must still hear it ended
            self.sig_call_done.emit(functools.partial(on_failed, f"Unexpected error ({type(exc).__name__}): {exc}"))
            return
        self.sig_call_done.emit(functools.partial(on_done, result))

    @Slot(object)
    def _on_call_done(self, deliver: Callable[[], None]) -> None:
        deliver()

    def run_in_background(
        self, job: Callable[[], T], on_done: Callable[[T], None], on_failed: Callable[[str], None]
    ) -> None:
        """Run local blocking work (files, the OS) on a pool thread; the outcome arrives on the GUI thread."""
        self._submit(job, on_done, on_failed)

    def call(
        self, job: Callable[[ControlClient], T], on_done: Callable[[T], None], on_failed: Callable[[str], None]
    ) -> None:
        """Run `job(client)` on a pool thread; `on_done(result)` or `on_failed(message)` then runs on the GUI
        thread. Not connected: `on_failed` at once."""
        if self._client is None or not self.is_connected:
            on_failed(NOT_CONNECTED)
            return

        # An answer that arrives once the connection is closing or closed is dropped: the window is going away,
        # and the view that asked may already be deleted (a closed window can be deleted before its service stops).
        def done(result: T) -> None:
            if not self._closing_or_closed:
                on_done(result)

        def failed(message: str) -> None:
            if not self._closing_or_closed:
                on_failed(message)

        self._submit(functools.partial(job, self._client), done, failed)

    # Opening ---------------------------------------------------------------------------------------------

    def open(self) -> None:
        """Connect to the running service, or start one; the outcome arrives as signals."""
        if self._phase is not Phase.IDLE:
            return
        self._set_phase(Phase.CONNECTING, "Connecting to the ModelDeck service\N{HORIZONTAL ELLIPSIS}")
        self._submit(self._connect_or_start, self._on_open_done, self._on_open_failed)

    def _connect_or_start(self) -> _Opened:
        client = connect(self._paths)
        if client is not None:
            return _Opened(client, None)
        self.sig_status_changed.emit(f"Starting the ModelDeck service (port {self._port})\N{HORIZONTAL ELLIPSIS}")
        started = start_service(self._paths, self._port)
        return _Opened(started.client, started.process)

    def reconnect(self) -> None:
        """After the connection was lost (the service stopped or crashed, or never started): connect to the service
        running now, or start one, as `open` does."""
        if self._phase is not Phase.LOST:
            return
        if self._stream is not None:
            self._stream.stop()  # it has ended already: this returns at once
            self._stream.deleteLater()
            self._stream = None
        self._set_phase(Phase.CONNECTING, "Reconnecting to the ModelDeck service\N{HORIZONTAL ELLIPSIS}")
        job = functools.partial(self._reconnect_or_start, self._client, self._process)
        self._submit(job, self._on_open_done, self._on_open_failed)

    def _reconnect_or_start(self, client: ControlClient | None, process: subprocess.Popen[bytes] | None) -> _Opened:
        if client is not None:
            client.close()
        opened = self._connect_or_start()
        if process is not None and process.poll() is None and opened.client.address.pid == process.pid:
            return _Opened(opened.client, process)  # the service this window started still runs: still ours to stop
        return opened

    def _on_open_done(self, opened: _Opened) -> None:
        self._client, self._process = opened.client, opened.process
        if self._phase is Phase.CLOSING:  # the window closed while the service was starting
            self._begin_shutdown()
            return
        origin = "started by ModelDeck" if opened.process is not None else "already running"
        self._set_phase(Phase.CONNECTED, f"Connected to the service at {opened.client.address.url} ({origin})")
        stream = EventStreamThread(opened.client.address, self)
        stream.sig_snapshot_received.connect(self.sig_models_received)
        stream.sig_engine_changed.connect(self.sig_engine_changed)
        stream.sig_log_received.connect(self.sig_log_received)
        stream.sig_download_changed.connect(self.sig_download_changed)
        stream.sig_sample_received.connect(self.sig_sample_received)
        stream.sig_bench_changed.connect(self.sig_bench_changed)
        stream.sig_quality_changed.connect(self.sig_quality_changed)
        stream.sig_engine_build_changed.connect(self.sig_engine_build_changed)
        stream.sig_stream_ended.connect(self._on_stream_ended)
        self._stream = stream
        stream.start()
        self._submit(opened.client.endpoint, self.sig_endpoint_received.emit, self._on_call_failed("read the endpoint"))
        self._poll_timer.start()

    def _on_restart_done(self, opened: _Opened) -> None:
        self._on_open_done(opened)
        if self.is_connected:
            self.sig_service_restarted.emit()

    def _on_open_failed(self, message: str) -> None:
        if self._phase is Phase.CLOSING:
            self._finish_close()
            return
        self._set_phase(Phase.LOST, "Not connected to the service")
        self.sig_error_occurred.emit(f"Could not connect to or start the service: {message}")

    @Slot(str)
    def _on_stream_ended(self, reason: str) -> None:
        if self._phase is not Phase.CONNECTED:
            return
        self._poll_timer.stop()
        self._set_phase(Phase.LOST, "Lost the connection to the service")
        self.sig_error_occurred.emit(reason)

    # Requests --------------------------------------------------------------------------------------------

    def start_model(self, model_id: str) -> None:
        if self._client is not None and self.is_connected:
            self._model_call(functools.partial(self._client.start_model, model_id), model_id, f"launch {model_id}")

    def stop_model(self, model_id: str) -> None:
        if self._client is not None and self.is_connected:
            self._model_call(functools.partial(self._client.stop_model, model_id), model_id, f"stop {model_id}")

    def _model_call(self, job: Callable[[], ModelRecord], model_id: str, action: str) -> None:
        """A start or stop: `sig_model_call_ended` follows either way (a refusal changes no engine's state)."""
        report = self._on_call_failed(action)

        def failed(message: str) -> None:
            report(message)
            self.sig_model_call_ended.emit(model_id)

        self._submit(job, lambda _record: self.sig_model_call_ended.emit(model_id), failed)

    def load_logs(self, model_id: str) -> None:
        """Fetch the latest lines of a model's engine log (for a model selected after its engine started)."""
        if self._client is not None and self.is_connected:
            job = functools.partial(self._client.logs, model_id, 500)
            done: Callable[[list[str]], None] = functools.partial(self.sig_logs_loaded.emit, model_id)
            self._submit(job, done, self._on_call_failed(f"read the log of {model_id}"))

    # Settings and secrets ---------------------------------------------------------------------------------

    def load_settings(self) -> None:
        """Read the settings; `sig_settings_received` follows, unless a save was in flight at any time during the
        read: the service may have answered with the settings from before the save, and the save's own answer
        (the settings after it) must not be undone by them."""
        asked_before = self._settings_saves_asked
        quiet = self._settings_saves_answered == asked_before

        def received(answer: SettingsAnswer) -> None:
            if quiet and self._settings_saves_asked == asked_before:
                self.sig_settings_received.emit(answer)

        self.call(lambda client: client.settings(), received, self._on_call_failed("read the settings"))

    def save_settings(self, changes: dict[str, Any], confirm_lan_exposure: bool = False) -> None:
        """Save settings; `sig_settings_saved` or `sig_settings_refused` (with the service's reason) follows."""
        self._settings_saves_asked += 1

        def answered(deliver: Callable[[T], None], result: T) -> None:
            self._settings_saves_answered += 1
            deliver(result)

        self.call(
            lambda client: client.update_settings(changes, confirm_lan_exposure),
            functools.partial(answered, self.sig_settings_saved.emit),
            functools.partial(answered, self.sig_settings_refused.emit),
        )

    def regenerate_api_key(self, on_done: Callable[[], None], on_failed: Callable[[str], None]) -> None:
        """A new endpoint key, in use at once: the new endpoint info arrives as `sig_endpoint_received`, then
        `on_done()`; a refusal (a key from $MODELDECK_API_KEY) as `on_failed(message)`."""

        def done(info: EndpointRecord) -> None:
            self.sig_endpoint_received.emit(info)
            on_done()

        self.call(lambda client: client.regenerate_api_key(), done, on_failed)

    def set_hf_token(self, token: str) -> None:
        # The token goes straight to the service's keyring; no signal carries it.
        self.call(lambda client: client.set_hf_token(token), lambda _none: self.sig_hf_token_changed.emit(True),
                  self._on_call_failed("save the Hugging Face token"))  # fmt: skip

    def clear_hf_token(self) -> None:
        self.call(lambda client: client.clear_hf_token(), lambda _removed: self.sig_hf_token_changed.emit(False),
                  self._on_call_failed("remove the Hugging Face token"))  # fmt: skip

    def restart(self) -> None:
        """Stop the service (and its engines) and start it again, so saved ports and address take effect.

        New ports are tried first: one that is taken is reported and the service keeps running as it is.
        Otherwise the connection goes CONNECTING, then CONNECTED with `sig_service_restarted`, or LOST."""
        self.call(check_new_ports, lambda _none: self._restart_now(), self._on_call_failed("restart the service"))

    def _restart_now(self) -> None:
        client = self._client
        if client is None or not self.is_connected:
            self.sig_error_occurred.emit(NOT_CONNECTED)
            return
        process = self._process
        self._poll_timer.stop()
        if self._stream is not None:
            self._stream.stop()
            self._stream = None
        self._set_phase(Phase.CONNECTING, "Restarting the ModelDeck service\N{HORIZONTAL ELLIPSIS}")
        self._submit(functools.partial(self._restart_service, client, process), self._on_restart_done,
                     self._on_open_failed)  # fmt: skip

    def _restart_service(self, client: ControlClient, process: subprocess.Popen[bytes] | None) -> _Opened:
        if process is not None:
            shut_down_service(client, process)
        else:
            shut_down_other_service(client, self._paths)
        client.close()
        started = start_service(self._paths, self._port)
        return _Opened(started.client, started.process)

    def _on_call_failed(self, action: str) -> Callable[[str], None]:
        def report(message: str) -> None:
            if self._phase is Phase.CONNECTED:
                self.sig_error_occurred.emit(f"Could not {action}: {message}")

        return report

    @Slot()
    def _on_poll_timer_timeout(self) -> None:
        if self._client is None or self._poll_in_flight or not self.is_connected:
            return
        self._poll_in_flight = True
        self._submit(self._client.models, self._on_poll_done, self._on_poll_failed)

    def _on_poll_done(self, models: list[ModelRecord]) -> None:
        self._poll_in_flight = False
        if self.is_connected:
            self.sig_usage_received.emit(models)

    def _on_poll_failed(self, message: str) -> None:
        self._poll_in_flight = False
        self._on_call_failed("read the models' memory use")(message)

    # Closing ---------------------------------------------------------------------------------------------

    def close(self, stop_service: bool | None = None) -> None:
        """Stop the event stream, and the service: always when `stop_service` is True, never when False, and when
        None only if this connection started it. Ends with `sig_connection_closed` (at once when there is nothing
        to wait for)."""
        if self._phase in (Phase.CLOSING, Phase.CLOSED):
            return
        self._stop_service = stop_service
        connecting = self._phase is Phase.CONNECTING
        self._set_phase(Phase.CLOSING, "Closing\N{HORIZONTAL ELLIPSIS}")
        self._poll_timer.stop()
        if self._stream is not None:
            self._stream.stop()
        if not connecting:  # otherwise the opening call, when it returns, finishes the close
            self._begin_shutdown()

    def _begin_shutdown(self) -> None:
        client, process, stop = self._client, self._process, self._stop_service
        if stop is None:
            stop = process is not None
        if client is None or not stop:
            self._finish_close()  # the service keeps serving
            return
        self.sig_status_changed.emit("Stopping the service and its engines\N{HORIZONTAL ELLIPSIS}")
        if process is not None:
            job = functools.partial(shut_down_service, client, process)
        else:
            job = functools.partial(shut_down_other_service, client, self._paths)
        self._submit(job, lambda _none: self._finish_close(), self._on_shutdown_failed)

    def _on_shutdown_failed(self, message: str) -> None:
        self.sig_error_occurred.emit(f"The service did not stop cleanly: {message}")
        self._finish_close()

    def _finish_close(self) -> None:
        if self._client is not None:
            self._client.close()
        self._pool.waitForDone(POOL_DRAIN_MS)
        self._set_phase(Phase.CLOSED, "Disconnected")
        self.sig_connection_closed.emit()

    def _set_phase(self, phase: Phase, status: str) -> None:
        self._phase = phase
        self.sig_status_changed.emit(status)
