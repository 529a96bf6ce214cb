"""Benchmark: what each dialect's translation adds to a streamed answer, side by side with plain chat completions,
through one ModelDeck in front of the synthetic engine (tests/bench/synthetic_engine.py, pacing its tokens as an
engine does). Per dialect and round: TTFT (send to the first event carrying text), and ModelDeck's CPU per text
event (user + system time of its process tree over the batch, divided by the text events the client read); then
the median of the rounds and each dialect's ratio to chat completions. The goal: no dialect above 1.10.

Run by hand from the repository root (pytest does not collect tests/bench):

    PYTHONPATH=. .venv/bin/python tests/bench/dialect_overhead.py --rounds 5

The routes, in an order swapped every round: OpenAI's `/v1/chat/completions`, Anthropic's `/v1/messages`, OpenAI's
`/v1/responses` (`store: false`: a stored response adds one SQLite write per request, not measured here) and
Ollama's `/api/chat` (NDJSON). The client reads the raw HTTP by hand, one keep-alive connection per stream; client
and engine share CPU 0, ModelDeck has CPU 1 (as in gateway_overhead.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from gateway_overhead import (  # run as a script beside it
    API_KEY,
    CLIENT_CPU,
    SYNTHETIC_ENGINE,
    VENV_PYTHON,
    Connection,
    Processes,
    free_port,
    start_modeldeck,
    tree_cpu_s,
    wait_ready,
)

MODEL = "synth"


@dataclass(frozen=True)
class Route:
    """A dialect's streamed request, what marks a text event in its answer, and how its events are separated."""

    name: str
    path: str
    body: dict[str, object]
    text: re.Pattern[bytes]
    end: tuple[bytes, ...]  # the answer's last event holds one of these
    separator: bytes = b"\n\n"


def routes(max_tokens: int) -> list[Route]:
    ask = [{"role": "user", "content": "Write a long essay about Rome."}]
    content = re.compile(rb'"content": ?"(?:[^"\\]|\\.)')
    chat = {"model": MODEL, "messages": ask, "max_tokens": max_tokens, "stream": True}
    responses = {"model": MODEL, "input": ask[0]["content"], "max_output_tokens": max_tokens, "stream": True,
                 "store": False}  # fmt: skip
    ollama = {"model": MODEL, "messages": ask, "stream": True, "options": {"num_predict": max_tokens}}
    return [
        Route("chat", "/v1/chat/completions", chat, content, (b"[DONE]",)),
        Route("anthropic", "/v1/messages", chat, re.compile(rb'"text_delta"'), (b"message_stop",)),
        # A cut at max_output_tokens ends in response.incomplete, as OpenAI's does.
        Route(
            "responses",
            "/v1/responses",
            responses,
            re.compile(rb'"response\.output_text\.delta"'),
            (b"response.completed", b"response.incomplete"),
        ),
        Route("ollama", "/api/chat", ollama, content, (b'"done": true', b'"done":true'), b"\n"),
    ]


async def stream_once(conn: Connection, port: int, route: Route) -> tuple[float | None, int]:
    """One streamed request: its TTFT and the text events read (raises on a failed answer)."""
    body = json.dumps(route.body).encode()
    head = (f"POST {route.path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {API_KEY}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n")  # fmt: skip
    if conn.writer is None:
        await conn.open()
    assert conn.reader is not None and conn.writer is not None
    sent = time.perf_counter()
    conn.writer.write(head.encode() + body)
    answer_head = await conn.reader.readuntil(b"\r\n\r\n")
    if b" 200 " not in answer_head.split(b"\r\n", 1)[0]:
        raise RuntimeError(f"{route.name}: {answer_head[:200]!r}")
    ttft, events, pending, ended = None, 0, b"", False
    while True:  # chunked transfer, as ModelDeck streams
        size = int((await conn.reader.readuntil(b"\r\n")).split(b";", 1)[0], 16)
        if size == 0:
            await conn.reader.readuntil(b"\r\n")
            break
        pending += (await conn.reader.readexactly(size + 2))[:-2].replace(b"\r\n", b"\n")
        *complete, pending = pending.split(route.separator)
        for event in complete:
            if route.text.search(event):
                events += 1
                ttft = ttft if ttft is not None else time.perf_counter() - sent
            ended = ended or any(end in event for end in route.end)
    if not ended and not any(end in pending for end in route.end):
        raise RuntimeError(f"{route.name}: the answer ended without any of {route.end!r}")
    return ttft, events


async def batch(port: int, pid: int, route: Route, streams: int, requests: int) -> tuple[list[float], float]:
    """`requests` over `streams` connections: each TTFT, and ModelDeck's CPU per text event."""
    ttfts: list[float] = []
    events = 0
    left = requests

    async def worker() -> None:
        nonlocal left, events
        conn = Connection(port)
        try:
            while left > 0:
                left -= 1
                ttft, count = await stream_once(conn, port, route)
                events += count
                if ttft is not None:
                    ttfts.append(ttft)
        finally:
            conn.close()

    before = tree_cpu_s(pid)
    await asyncio.gather(*(worker() for _ in range(streams)))
    after = tree_cpu_s(pid)
    assert before is not None and after is not None and events > 0
    return ttfts, (after - before) / events


async def amain(args: argparse.Namespace) -> None:
    os.sched_setaffinity(0, {CLIENT_CPU})
    work = Path(tempfile.mkdtemp(prefix="dialect-bench-"))
    procs = Processes(work)
    engine_port = free_port()
    cmd = [str(VENV_PYTHON), str(SYNTHETIC_ENGINE), "--port", str(engine_port), "--token-delay-ms",
           str(args.token_delay_ms)]  # fmt: skip
    try:
        engine = procs.start("synthetic", cmd, CLIENT_CPU)
        wait_ready(procs, "synthetic", engine, engine_port)
        home = work / "home"
        home.mkdir()
        pid, port = start_modeldeck(procs, home, MODEL, engine_port)
        every = routes(args.max_tokens)
        ttft: dict[str, list[float]] = {route.name: [] for route in every}
        cpu: dict[str, list[float]] = {route.name: [] for route in every}
        for route in every:  # warm-up: first requests compile regexes and open connections
            await batch(port, pid, route, 1, 2)
        for round_index in range(args.rounds):
            for route in every if round_index % 2 == 0 else every[::-1]:
                ttfts, per_event = await batch(port, pid, route, args.streams, args.requests)
                ttft[route.name].append(statistics.median(ttfts))
                cpu[route.name].append(per_event)
                print(f"round {round_index + 1} {route.name:10} TTFT p50 {statistics.median(ttfts) * 1e3:6.2f} ms, "
                      f"{per_event * 1e6:6.1f} us CPU per text event", flush=True)  # fmt: skip
    finally:
        procs.stop_all()
    load = os.getloadavg()
    print(f"\nmedians of {args.rounds} rounds ({args.streams} streams, {args.requests} requests of "
          f"{args.max_tokens} tokens a round; load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}):")  # fmt: skip
    base_ttft, base_cpu = statistics.median(ttft["chat"]), statistics.median(cpu["chat"])
    for name in ttft:
        t, c = statistics.median(ttft[name]), statistics.median(cpu[name])
        print(f"  {name:10} TTFT {t * 1e3:6.2f} ms ({t / base_ttft:4.2f} x chat), "
              f"CPU {c * 1e6:6.1f} us per text event ({c / base_cpu:4.2f} x chat)")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--streams", type=int, default=4)
    parser.add_argument("--requests", type=int, default=16, help="per route and round")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--token-delay-ms", type=float, default=5.0, help="the synthetic engine's pace")
    asyncio.run(amain(parser.parse_args()))


if __name__ == "__main__":
    main()
