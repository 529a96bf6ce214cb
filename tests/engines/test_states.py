"""Engine state transitions: one table (engines.states.TRANSITIONS) says which are allowed, the supervisor checks
every change against it, and its state cannot be set from outside. Real processes from the tiny fault engine
(tests/engines/fault_engine.py): it restarts, fails and stops on demand, which the real engine cannot."""

from __future__ import annotations

from pathlib import Path

import pytest

from engines.states import TRANSITIONS, EngineState, IllegalTransition, check_transition
from engines.supervisor import SupervisorPolicy
from tests.engines.test_supervisor import fault_command, make
from tests.support.waiting import wait_until


@pytest.mark.parametrize(
    ("previous", "state"),
    [
        (EngineState.STOPPED, EngineState.READY),  # never ready without starting
        (EngineState.STOPPED, EngineState.STOPPING),
        (EngineState.READY, EngineState.STARTING),
        (EngineState.FAILED, EngineState.READY),
        (EngineState.STOPPING, EngineState.READY),
        (EngineState.READY, EngineState.READY),
    ],
)
def test_an_illegal_transition_raises(previous: EngineState, state: EngineState) -> None:
    with pytest.raises(IllegalTransition, match=f"from {previous} to {state}"):
        check_transition(previous, state)


def test_every_state_has_a_way_out_and_every_state_is_reached() -> None:
    assert set(TRANSITIONS) == set(EngineState)
    assert all(TRANSITIONS[state] for state in EngineState)
    reached = set().union(*TRANSITIONS.values())
    assert reached == set(EngineState)


async def test_a_supervisor_moves_only_along_the_table(tmp_path: Path) -> None:
    """Start, a crash and its restart, giving up, a new start, a stop: each event is a transition of the table."""
    policy = SupervisorPolicy(max_failures=2, failure_window_s=60, backoff_initial_s=0.05, stop_grace_s=1)
    supervisor, recorder = make(tmp_path, fault_command("--exit-after", "0.2", "--exit-code", "3"), policy)
    try:
        assert await supervisor.start() == EngineState.READY
        await wait_until(lambda: supervisor.state == EngineState.FAILED, "failed")
        assert await supervisor.start() == EngineState.READY  # FAILED -> STARTING
    finally:
        await supervisor.stop("stopped by the test")
    assert supervisor.state == EngineState.STOPPED and supervisor.message == "stopped by the test"
    states = recorder.states()
    assert EngineState.RESTARTING in states and EngineState.FAILED in states and states[-1] == EngineState.STOPPED
    for event in recorder.events:
        check_transition(event.previous, event.state)


def test_the_state_cannot_be_set_from_outside(tmp_path: Path) -> None:
    supervisor, _ = make(tmp_path, fault_command())
    with pytest.raises(AttributeError):
        supervisor.state = EngineState.READY  # type: ignore[misc]
    with pytest.raises(AttributeError):
        supervisor.message = "ready"  # type: ignore[misc]
    assert supervisor.state == EngineState.STOPPED
