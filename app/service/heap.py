"""The service's heap and Python's cyclic garbage collector.

A full collection walks every container object the process holds. Right after start-up that is some 90,000
objects (imported modules, classes, functions, pydantic and uvicorn internals) that live as long as the process,
and walking them stops the event loop for tens of milliseconds (45 ms of CPU on the 2-core development VM): every
stream in flight, and every request arriving, waits that long. Such pauses came every few thousand requests and
were the gateway's TTFT tail at 64 streams (docs/PERFORMANCE.md, "What the gateway costs").

Once the service is up, those objects are moved to the collector's permanent generation, which it never walks;
later collections see only what was made since: requests in flight and the records kept of recent ones.
"""

from __future__ import annotations

import gc


def settle_heap() -> int:
    """Collect what start-up left behind, then hide every object alive now from later collections. Call once,
    when start-up is done: what is frozen is never collected, so freezing again would keep garbage forever.
    Returns how many objects were frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
