"""The FIFO admission queue in front of one-at-a-time engines (pure asyncio, no processes)."""

from __future__ import annotations

import asyncio

import pytest

from app.service.launch.admission import EngineQueue, QueueFull
from tests.support.waiting import wait_until


async def test_requests_run_one_at_a_time_in_arrival_order() -> None:
    queue = EngineQueue(capacity=1, max_waiting=10)
    order: list[int] = []
    running = 0

    async def request(index: int) -> None:
        nonlocal running
        async with queue.slot():
            running += 1
            assert running == 1
            order.append(index)
            await asyncio.sleep(0.01)
            running -= 1

    tasks = []
    for index in range(8):
        tasks.append(asyncio.create_task(request(index)))
        await asyncio.sleep(0)  # arrive in this order
    await asyncio.gather(*tasks)
    assert order == list(range(8))
    assert (queue.running, queue.waiting) == (0, 0)


async def test_full_queue_refuses_with_retry_after() -> None:
    queue = EngineQueue(capacity=1, max_waiting=1)
    release = asyncio.Event()

    async def hold() -> None:
        async with queue.slot():
            await release.wait()

    holder = asyncio.create_task(hold())
    waiter = asyncio.create_task(hold())
    await wait_until(lambda: (queue.running, queue.waiting) == (1, 1), "one holding, one waiting")
    with pytest.raises(QueueFull) as full:
        async with queue.slot():
            pass
    assert full.value.retry_after_s >= 1
    release.set()
    await asyncio.gather(holder, waiter)


async def test_cancelled_waiter_leaves_the_line_and_running_one_frees_its_slot() -> None:
    queue = EngineQueue(capacity=1, max_waiting=5)
    started = asyncio.Event()

    async def long_request() -> None:
        async with queue.slot():
            started.set()
            await asyncio.sleep(60)

    running = asyncio.create_task(long_request())
    await started.wait()
    waiting = asyncio.create_task(long_request())
    await wait_until(lambda: queue.waiting == 1, "the second request waits")
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)
    assert queue.waiting == 0
    running.cancel()  # a client that left mid-stream
    await asyncio.gather(running, return_exceptions=True)
    assert queue.running == 0
    async with queue.slot() as queued_s:  # the engine is free at once
        assert queued_s < 1


async def test_raising_the_capacity_admits_waiters_in_order() -> None:
    """An engine restarted with more slots (llama-server's --parallel) lets the line in at once, first come first."""
    queue = EngineQueue(1, max_waiting=8)
    assert await queue.acquire() == 0.0
    admitted: list[int] = []

    async def wait_in_line(n: int) -> None:
        await queue.acquire()
        admitted.append(n)

    waiters = [asyncio.create_task(wait_in_line(n)) for n in range(3)]
    await asyncio.sleep(0)
    assert queue.waiting == 3 and admitted == []
    queue.set_capacity(3)
    await asyncio.gather(*waiters[:2])
    assert admitted == [0, 1]  # two new slots: the first two waiters
    assert queue.running == 3 and queue.waiting == 1
    queue.release(0.0)
    await waiters[2]
    assert admitted == [0, 1, 2] and queue.running == 3 and queue.waiting == 0
