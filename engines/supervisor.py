"""Runs one engine process: spawn, readiness, log capture, restart with backoff, and a clean stop.

One supervisor owns one engine's state; a single lifecycle task changes it, so transitions never race.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from engines.atomic_files import write_atomically
from engines.base import EngineCommand
from engines.diagnosis import Diagnosis, diagnose
from engines.gpu_release import GPUMemoryProbe, GPURelease, process_tree, wait_gpu_released
from engines.logs import EngineLog
from engines.processes import (
    free_loopback_port,
    spawn_engine,
    stop_process_tree,
    wait_for_exit,
    write_record,
)
from engines.states import ACTIVE_STATES, EngineState, StateChange, check_transition

DIAGNOSIS_LINES = 200  # the end of a load log: llama.cpp prints the failing allocation a few lines from the end

CommandFactory = Callable[[int], EngineCommand]
EventSink = Callable[[StateChange], None]
LogSink = Callable[[str, str], None]


@dataclass(frozen=True)
class SupervisorPolicy:
    """Timing of readiness, stop and restarts."""

    ready_timeout_s: float = 60.0  # without new log output; loading progress pushes the deadline back
    ready_poll_s: float = 0.1
    stop_grace_s: float = 5.0
    max_failures: int = 5  # unexpected exits within `failure_window_s` before giving up
    failure_window_s: float = 120.0
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 30.0
    failure_log_lines: int = 15
    gpu_release_timeout_s: float = 30.0  # after a stop, wait this long at most for the GPU memory to be freed
    gpu_release_poll_s: float = 0.25


class StartFailed(Exception):
    """The engine exited or never became ready; the message carries the last log lines."""


@dataclass(frozen=True)
class LaunchRecord:
    """The command an engine was started with and the environment added to it, secrets redacted."""

    argv: tuple[str, ...]
    env: dict[str, str]


class EngineSupervisor:
    """Supervises the engine serving one model."""

    def __init__(
        self,
        model_id: str,
        command_factory: CommandFactory,
        log_path: Path,
        records_dir: Path,
        on_event: EventSink | None = None,
        on_log: LogSink | None = None,
        policy: SupervisorPolicy | None = None,
        gpu_memory_probe: GPUMemoryProbe | None = None,
    ) -> None:
        self.model_id = model_id
        self._command_factory = command_factory
        self._records_dir = records_dir
        self._on_event = on_event
        self._on_log = on_log
        self.policy = policy or SupervisorPolicy()
        self._gpu_memory_probe = gpu_memory_probe
        self.gpu_release: GPURelease | None = None  # how the last stop's wait for GPU memory ended
        self.log = EngineLog(log_path)
        self._state = EngineState.STOPPED  # changed only by _set_state, as engines.states.TRANSITIONS allows
        self._message = ""
        self.diagnosis: Diagnosis | None = None  # why the last exit happened, when it could be told
        self.port: int | None = None
        self.restarts = 0
        # The last command started: argv and the environment it added, secrets redacted (benchmark cards keep it).
        self.launch: LaunchRecord | None = None
        self._process: asyncio.subprocess.Process | None = None
        self._record_path: Path | None = None
        self._files: tuple[Path, ...] = ()  # what the running command asked to be written for it
        self._lifecycle: asyncio.Task[None] | None = None
        self._settled: asyncio.Event = asyncio.Event()
        self._last_output = 0.0
        self._ready_path = "/"
        self._ready_headers: dict[str, str] = {}
        self._pump: asyncio.Task[None] | None = None

    @property
    def state(self) -> EngineState:
        return self._state

    @property
    def message(self) -> str:
        """What the current state is about: why it failed or stopped, where a restart stands."""
        return self._message

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process and self._process.returncode is None else None

    @property
    def base_url(self) -> str | None:
        return f"http://127.0.0.1:{self.port}" if self.port else None

    async def start(self) -> EngineState:
        """Start the engine and wait until it is ready or has failed. Safe to call while already running."""
        if self.state not in ACTIVE_STATES:
            self._settled = asyncio.Event()
            self.restarts = 0
            # Set synchronously, so that a second start() in the same tick joins this one.
            self._set_state(EngineState.STARTING, "starting")
            self._lifecycle = asyncio.create_task(self._run(), name=f"engine:{self.model_id}")
        await self._settled.wait()
        return self.state

    async def stop(self, reason: str = "stopped") -> None:
        """Stop the engine and every process it started, and close its log file. Safe to call twice.
        `reason` is the message of the stopped state (why it was stopped, when not by the user)."""
        if self._lifecycle is None and self._process is None:
            self.log.close()
            return
        if self.state in ACTIVE_STATES:
            self._set_state(EngineState.STOPPING, "stopping")
        # The engine's processes, taken now: once stopped, their children can no longer be found.
        pids = process_tree(self._process.pid) if self._process and self._process.returncode is None else set()
        lifecycle, self._lifecycle = self._lifecycle, None
        if lifecycle is not None:
            lifecycle.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await lifecycle
        await self._reap(self._process)
        self._process = None
        # A stop is done when the next engine can have the memory: the driver frees it after the processes exit.
        self.gpu_release = await wait_gpu_released(
            pids, self._gpu_memory_probe, self.policy.gpu_release_timeout_s, self.policy.gpu_release_poll_s
        )
        self._settled.set()
        self.log.close()
        if self.state == EngineState.STOPPING:
            self._set_state(EngineState.STOPPED, reason)

    async def wait_exited(self, timeout_s: float) -> bool:
        """Wait up to `timeout_s` for the engine process to exit, as when it refuses connections while still
        reported ready. True if it has: start() callers then wait for the restart (or the failure)."""
        process = self._process
        if process is not None and process.returncode is None:
            try:
                await asyncio.wait_for(wait_for_exit(process), timeout_s)
            except TimeoutError:
                return False
        if self._process is process and self.state == EngineState.READY:
            self._settled.clear()  # the lifecycle task has not seen the exit yet; it sets this again
        return True

    async def _run(self) -> None:
        failures: deque[float] = deque()
        ever_ready = False
        while True:
            try:
                process = await self._launch()
                await self._wait_ready(process)
            except StartFailed as failure:
                await self._reap(self._process)
                if not ever_ready:
                    self._fail(str(failure))
                    return
                reason = str(failure)
            else:
                ever_ready = True
                self._set_state(EngineState.READY, "ready")
                self._settled.set()
                pids = process_tree(process.pid)  # its workers, while they can still be found
                code = await wait_for_exit(process)
                await self._reap(process)
                # A crashed engine's memory is freed after its processes exit; the restart waits for it.
                self.gpu_release = await wait_gpu_released(
                    pids, self._gpu_memory_probe, self.policy.gpu_release_timeout_s, self.policy.gpu_release_poll_s
                )
                reason = self._exit_report(f"exited unexpectedly with code {code}", code)
            now = time.monotonic()
            failures.append(now)
            while failures and now - failures[0] > self.policy.failure_window_s:
                failures.popleft()
            if len(failures) >= self.policy.max_failures:
                self._fail(f"gave up after {len(failures)} failures in {self.policy.failure_window_s:.0f} s: {reason}")
                return
            delay = min(self.policy.backoff_max_s, self.policy.backoff_initial_s * 2 ** (len(failures) - 1))
            self.restarts += 1
            self._settled.clear()  # callers of start() now wait for the restart to finish
            self._set_state(EngineState.RESTARTING, f"{reason}\nrestarting in {delay:.1f} s")
            await asyncio.sleep(delay)
            self._set_state(EngineState.RESTARTING, f"restarting (attempt {self.restarts})")

    async def _launch(self) -> asyncio.subprocess.Process:
        self.port = free_loopback_port()
        command = self._command_factory(self.port)
        self.log.add_secrets(command.secrets)
        redact = self.log.redact
        self.launch = LaunchRecord(tuple(redact(arg) for arg in command.argv),
                                   {name: redact(value) for name, value in command.env.items()})  # fmt: skip
        self._ready_path = command.ready_path
        self._ready_headers = command.ready_headers
        for path, text in command.files.items():
            try:
                write_atomically(path, text)
            except OSError as exc:
                raise StartFailed(f"could not write {exc.filename} for {command.argv[0]}: {exc.strerror}") from exc
            self._files += (path,)
        marker = uuid.uuid4().hex
        env = {**command.env, "MODELDECK_MODEL_ID": self.model_id}
        try:
            process, record = await spawn_engine(command.argv, env, marker)
        except OSError as exc:
            raise StartFailed(f"could not start {command.argv[0]}: {exc}") from exc
        self._process = process
        try:
            self._record_path = write_record(self._records_dir, record) if record else None
        except OSError as exc:  # a full disk: an engine no record names would outlive a crash of this service
            raise StartFailed(f"could not record {command.argv[0]} in {self._records_dir}: {exc.strerror}") from exc
        self._last_output = time.monotonic()
        assert process.stdout is not None
        self._pump = asyncio.create_task(self._pump_output(process.stdout), name=f"engine-log:{self.model_id}")
        return process

    async def _pump_output(self, stream: asyncio.StreamReader) -> None:
        while True:
            try:
                raw = await stream.readline()
            except ValueError:  # a line over the stream limit: take what is buffered
                raw = await stream.read(64 * 1024)
            if not raw:
                return
            self._last_output = time.monotonic()
            line = self.log.append(raw.decode("utf-8", errors="replace"))
            if self._on_log is not None:
                self._on_log(self.model_id, line)

    async def _wait_ready(self, process: asyncio.subprocess.Process) -> None:
        url = f"{self.base_url}{self._ready_path}"
        timeout = aiohttp.ClientTimeout(total=2.0)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while True:
                if process.returncode is not None:
                    await asyncio.sleep(0.05)  # let the pump collect the final lines
                    raise StartFailed(
                        self._exit_report(f"exited with code {process.returncode} during start-up", process.returncode)
                    )
                if time.monotonic() - self._last_output > self.policy.ready_timeout_s:
                    raise StartFailed(
                        f"not ready after {self.policy.ready_timeout_s:.0f} s without progress; "
                        f"last output:\n{self._log_excerpt()}"
                    )
                if await self._probe(session, url):
                    return
                await asyncio.sleep(self.policy.ready_poll_s)

    async def _probe(self, session: aiohttp.ClientSession, url: str) -> bool:
        try:
            async with session.get(url, headers=self._ready_headers) as response:
                return response.status == 200
        except (aiohttp.ClientError, TimeoutError):
            return False  # not listening yet; the exit and deadline checks decide when to give up

    async def _reap(self, process: asyncio.subprocess.Process | None) -> None:
        if process is not None:
            await stop_process_tree(process, self.policy.stop_grace_s)
        pump, self._pump = self._pump, None
        if pump is not None:
            # the pipe closes when the engine exits, unless a stray grandchild still holds it
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(pump, 1.0)
        if self._record_path is not None:
            self._record_path.unlink(missing_ok=True)
            self._record_path = None
        for path in self._files:
            path.unlink(missing_ok=True)
        self._files = ()

    def _exit_report(self, what: str, returncode: int | None) -> str:
        """What happened, why if the exit status or the log tells, and the last lines the engine printed."""
        self.diagnosis = diagnose(returncode, self.log.tail(DIAGNOSIS_LINES))
        why = f"{self.diagnosis.text()}\n" if self.diagnosis else ""
        return f"{why}{what}; last output:\n{self._log_excerpt()}"

    def _log_excerpt(self) -> str:
        return "\n".join(self.log.tail(self.policy.failure_log_lines)) or "(no output)"

    def _fail(self, message: str) -> None:
        self._set_state(EngineState.FAILED, message)
        self._settled.set()

    def _set_state(self, state: EngineState, message: str) -> None:
        """The only place the state changes, and only as the table allows (IllegalTransition)."""
        check_transition(self._state, state)
        previous, self._state, self._message = self._state, state, message
        if self._on_event is not None:
            self._on_event(StateChange(self.model_id, state, previous, message, self.pid, self.port))


__all__ = ["EngineSupervisor", "LaunchRecord", "StartFailed", "SupervisorPolicy"]
