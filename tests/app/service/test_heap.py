"""settle_heap: start-up garbage collected, what is alive hidden from later collections. Each check runs in a
fresh interpreter, as the service does, so that the test process's own heap is never frozen."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.support.service import REPO

_CHECK = textwrap.dedent(
    """
    import gc, weakref
    from app.service.heap import settle_heap

    class Node:
        pass

    kept = Node()
    kept.me = kept  # a cycle still in use: frozen, never walked again
    dead = Node()
    dead.me = dead  # a cycle nobody holds: start-up garbage, to be collected before freezing
    dead_ref = weakref.ref(dead)
    del dead
    frozen = settle_heap()
    assert dead_ref() is None, "garbage from before was frozen instead of collected"
    assert frozen == gc.get_freeze_count() > 1000, frozen
    assert all(obj is not kept for obj in gc.get_objects()), "a frozen object is still walked"
    gc.collect()
    assert kept.me is kept

    later = Node()
    later.me = later  # made after settling: collected as usual
    later_ref = weakref.ref(later)
    del later
    gc.collect()
    assert later_ref() is None, "garbage made after settling was not collected"
    print("ok")
    """
)


def test_settle_heap_collects_then_freezes_what_is_alive() -> None:
    result = subprocess.run(
        [sys.executable, "-c", _CHECK], cwd=REPO, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
