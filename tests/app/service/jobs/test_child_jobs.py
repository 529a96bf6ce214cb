"""ChildJobs, the base of the service's benchmark and quality runs, on real child processes (a Python that sleeps):
one run at a time even when two starts arrive together."""

from __future__ import annotations

import asyncio
import logging
import sys
from dataclasses import dataclass
from typing import Any

import pytest

from app.service.events import EventBus
from app.service.jobs.child_jobs import ChildJobs, ChildJobWords, JobConflict, RunState

WORDS = ChildJobWords(event="sleep", noun="sleep", process="sleep", busy="{model} is sleeping.", idle="Nothing runs.")


@dataclass(frozen=True)
class SleepRequest:
    model: str

    def argv(self) -> tuple[str, ...]:
        return (sys.executable, "-c", "import time; time.sleep(60)")


@dataclass
class SleepRun:
    id: str
    request: SleepRequest
    state: RunState = "running"
    card_id: str | None = None
    error: str | None = None
    finished: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "state": self.state}


class Sleeps(ChildJobs[SleepRequest, SleepRun]):
    def __init__(self) -> None:
        super().__init__(EventBus(), SleepRun, WORDS, JobConflict, logging.getLogger("test"), 5.0)


def test_two_starts_at_once_run_one_child_and_refuse_the_other() -> None:
    async def scenario() -> None:
        jobs = Sleeps()
        first, second = await asyncio.gather(
            jobs.start(SleepRequest("a")), jobs.start(SleepRequest("b")), return_exceptions=True
        )
        assert isinstance(first, SleepRun) and first.state == "running" and jobs.current is first
        assert isinstance(second, JobConflict) and str(second) == "a is sleeping."
        cancelled = await jobs.cancel()
        assert cancelled is first and cancelled.state == "cancelled"
        with pytest.raises(JobConflict):
            await jobs.cancel()  # the refused start left nothing running behind it

    asyncio.run(scenario())
