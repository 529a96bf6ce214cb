"""The window's event thread, when the service speaks of a model state this window does not know."""

from __future__ import annotations

from pytestqt.qtbot import QtBot

from app.gui.connection.event_stream import EventStreamThread
from tests.support.newer_service import UNKNOWN_STATE, newer_service


def test_an_unknown_state_ends_the_stream_with_the_reason(qtbot: QtBot) -> None:
    """Not an exception lost in a QThread: the stream ends, and the reason names the state."""
    with newer_service() as address:
        thread = EventStreamThread(address)
        with qtbot.waitSignal(thread.sig_stream_ended, timeout=10_000) as ended:
            thread.start()
        assert thread.wait(10_000)
    reason = str(ended.args[0])
    assert f"'{UNKNOWN_STATE}'" in reason and "same version" in reason
