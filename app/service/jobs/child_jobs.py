"""Jobs the service runs one at a time as child processes that report their progress as JSON lines.

A child runs in a process group of its own (spawn_engine), so its work never competes with the gateway for this
interpreter's lock and a cancel is a signal to one group. Its JSON lines become the run's state, which changes only
on the event loop and is published on the bus: progress throttled to a few events a second, the rest at once.
BenchRuns and QualityRuns build on ChildJobs and keep only what differs: the request, the run and its events.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import time
from collections import deque
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any, Generic, Literal, Protocol, TypeVar

from app.bounded_json import load_json
from app.service.events import EventBus
from engines.processes import spawn_engine, stop_process_tree

RunState = Literal["running", "completed", "failed", "cancelled"]
PROGRESS_INTERVAL_S = 0.25
ERROR_LINES = 8  # the child's last lines that are not JSON: what it said when it failed


class BadJobRequest(Exception):
    """The request cannot be run as asked; the message says why, `param` names the field."""

    def __init__(self, message: str, param: str | None = None, status: int = 400) -> None:
        super().__init__(message)
        self.param = param
        self.status = status


class JobConflict(Exception):
    """A run is already going (or none is, for a cancel)."""


class JobCardNotFound(Exception):
    """No saved card has that id."""


def request_body(
    raw: bytes, fields: Collection[str], example: str, bad: type[BadJobRequest]
) -> tuple[dict[str, Any], str]:
    """A start request's JSON object and the `model` it names; `bad` (a BadJobRequest) says what is wrong with it.
    `example` shows a right body in the message for one that is no object."""
    try:
        body = load_json(raw or b"null")
    except ValueError:
        raise bad("The body must be JSON.") from None
    if not isinstance(body, dict):
        raise bad(f"The body must be a JSON object such as {example}.")
    unknown = sorted(set(body) - set(fields))
    if unknown:
        raise bad(f"Unknown field {unknown[0]!r}.", unknown[0])
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise bad("`model` is required: a model id from GET /api/models.", "model")
    return body, model


class ChildRequest(Protocol):
    """What a child job is asked to do: a model, and the command that does it."""

    @property
    def model(self) -> str: ...

    def argv(self) -> tuple[str, ...]: ...


class ChildRun(Protocol):
    """One child job's run and where it stands, as a ChildJobs needs to see it."""

    id: str
    state: RunState
    card_id: str | None
    error: str | None
    finished: float | None

    @property
    def request(self) -> ChildRequest: ...

    def to_dict(self) -> dict[str, Any]: ...


RequestT = TypeVar("RequestT", bound=ChildRequest)
RunT = TypeVar("RunT", bound=ChildRun)


@dataclass(frozen=True)
class ChildJobWords:
    """How a kind of child job is named in its events, errors and log lines."""

    event: str  # the bus event's type, also the prefix of run ids
    noun: str  # in log lines: "benchmark", "quality run"
    process: str  # "The {process} process exited with code 1."
    busy: str  # the conflict for a second start; {model} is the running run's model
    idle: str  # the conflict for a cancel with nothing running


class ChildJobs(Generic[RequestT, RunT]):
    """At most one running child job of a kind; subclasses read its events into the run (`_apply`)."""

    def __init__(
        self,
        bus: EventBus,
        new_run: Callable[[str, RequestT], RunT],
        words: ChildJobWords,
        conflict: Callable[[str], JobConflict],
        log: logging.Logger,
        stop_grace_s: float,
    ) -> None:
        self._bus = bus
        self._new_run = new_run
        self._words = words
        self._conflict = conflict
        self._log = log
        self._stop_grace_s = stop_grace_s
        self._ids = itertools.count(1)
        self._run: RunT | None = None
        self._process: asyncio.subprocess.Process | None = None
        self._task: asyncio.Task[None] | None = None
        self._starting = asyncio.Lock()  # a second start waits for the first's child, then finds it running
        self._last_published = 0.0

    @property
    def current(self) -> RunT | None:
        """The running run, else the last one (None before the first)."""
        return self._run

    async def start(self, request: RequestT) -> RunT:
        async with self._starting:
            if self._run is not None and self._run.state == "running":
                raise self._conflict(self._words.busy.format(model=self._run.request.model))
            run = self._new_run(f"{self._words.event}-{next(self._ids)}", request)
            process, _ = await spawn_engine(request.argv(), {}, run.id, whole_environment=True)  # ModelDeck's own
            self._run, self._process = run, process
        self._task = asyncio.create_task(self._follow(run, process))
        self._publish(run)
        self._log.info("%s %s of %s started (pid %s)", self._words.noun, run.id, request.model, process.pid)
        return run

    async def cancel(self) -> RunT:
        run, process, task = self._run, self._process, self._task
        if run is None or run.state != "running" or process is None or task is None:
            raise self._conflict(self._words.idle)
        self._end(run, "cancelled")  # before the child ends, so its exit is not a failure
        # The child's group and every descendant: its connections close (the gateway cancels their requests
        # upstream), and a tool it started in a session of its own stops too.
        await stop_process_tree(process, self._stop_grace_s)
        await task
        return run

    async def stop(self) -> None:
        """Cancel a running job (the service is stopping)."""
        if self._run is not None and self._run.state == "running":
            await self.cancel()

    def _apply(self, run: RunT, event: dict[str, Any]) -> None:
        """Read one of the child's events into the run, and publish it."""
        raise NotImplementedError

    def _succeeded(self, run: RunT, code: int) -> bool:
        """Whether a child that exited by itself with `code` did its job."""
        return run.card_id is not None

    def _end(self, run: RunT, state: RunState) -> None:
        run.state = state

    async def _follow(self, run: RunT, process: asyncio.subprocess.Process) -> None:
        said: deque[str] = deque(maxlen=ERROR_LINES)
        assert process.stdout is not None  # spawn_engine pipes it
        try:
            async for raw in process.stdout:
                line = raw.decode("utf-8", errors="replace").strip()
                event = _event(line)
                if event is None:
                    if line:
                        said.append(line)
                elif run.state == "running":
                    self._apply(run, event)
        except ValueError:  # a line over the stream's limit: nothing this program prints
            said.append(f"The {self._words.process} process wrote a line too long to read; it was stopped.")
            await stop_process_tree(process, self._stop_grace_s)
        code = await process.wait()
        if run.state == "running":
            if self._succeeded(run, code):
                self._end(run, "completed")
            else:
                self._end(run, "failed")
                run.error = "\n".join(said) or f"The {self._words.process} process exited with code {code}."
        run.finished = time.time()
        self._publish(run)
        self._log.info("%s %s %s", self._words.noun, run.id, run.state)

    def _publish(self, run: RunT, throttled: bool = False) -> None:
        now = time.monotonic()
        if throttled and now - self._last_published < PROGRESS_INTERVAL_S:
            return
        self._last_published = now
        self._bus.publish({"type": self._words.event, "run": run.to_dict()})


def _event(line: str) -> dict[str, Any] | None:
    if not line.startswith("{"):
        return None
    try:
        event = json.loads(line)
    except ValueError:
        return None
    return event if isinstance(event, dict) and "type" in event else None


__all__ = ["BadJobRequest", "ChildJobWords", "ChildJobs", "ChildRequest", "ChildRun", "JobCardNotFound", "JobConflict",
           "RunState", "request_body"]  # fmt: skip
