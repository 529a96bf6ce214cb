"""Benchmark: the service under steady streaming load for a long time. Does it leak memory or file descriptors,
fail requests, or slow down?

Run by hand from the repository root (pytest does not collect tests/bench):

    .venv/bin/python tests/bench/soak.py                       # 64 streams for 30 minutes, synthetic engine
    .venv/bin/python tests/bench/soak.py --minutes 3 --period-minutes 1
    .venv/bin/python tests/bench/soak.py --engine llama-server --streams 16 --minutes 10

What it does:

  - starts the engine and the real service (`python -m app serve`, its own HTTP server for /v1), all on
    127.0.0.1: the synthetic engine (tests/bench/synthetic_engine.py, `--token-delay-ms` per token, 5 by default,
    as a real engine paces its tokens) behind `serve --upstream`, or llama-server on the bundled model started by
    the service itself (`--engine llama-server`: the build in $MODELDECK_TEST_ENGINES, `--parallel` slots, and a
    gateway queue as long as `--streams`, so that waiting requests queue rather than being refused);
  - runs `--streams` keep-alive connections, each sending streamed chat completions one after another, each
    with a prompt of its own (a repeated prompt would measure the prompt cache), with the lean raw-asyncio
    client of tests/bench/gateway_overhead.py; the streams start staggered over one second; every request has
    a time limit, and the streams stop at the end of the run;
  - at the start (service ready, no load yet), at the end of every period (`--period-minutes`) and after the
    load has stopped, prints the service process's resident memory (RSS) and open file descriptors; per period
    the requests that ended in it, the failed ones (HTTP errors, error events, cut streams, time-outs) and
    TTFT p50 / p99 (to the first chunk with generated content);
  - checks the targets at the end: RSS growth under 5 % and fd count flat from the end of the first period (the
    warm-up: connections opened, code paths run once, the bounded in-memory request history filling) to the
    end of the last, and no failed request. The growth from the idle start is printed too, for what it is.

Client and engine run on CPU 0 and the service on CPU 1 (taskset), as in gateway_overhead.py. The exit status
is 0 when every target is met, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from gateway_overhead import (  # run as a script beside it
    API_KEY,
    CLIENT_CPU,
    PROXY_CPU,
    REQUEST_TIMEOUT_S,
    SYNTHETIC_ENGINE,
    VENV_PYTHON,
    Connection,
    Processes,
    Result,
    Target,
    free_port,
    machine_facts,
    pct,
    stream_once,
    wait_ready,
)
from synthetic_engine import run

RSS_GROWTH_TARGET = 0.05
PROMPT = "Write a long, detailed essay about the history of the city of Rome, from its founding to the modern day."
START_SPREAD_S = 1.0
STOP_GRACE_S = 300.0  # after the run's end, requests still in flight get this long before they are cancelled


@dataclass(frozen=True)
class Snapshot:
    """The service process at one moment."""

    label: str
    elapsed_s: float
    rss_bytes: int
    fds: int


@dataclass
class Period:
    index: int
    results: list[Result] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)

    def add(self, result: Result) -> None:
        self.results.append(result)
        if not result.ok:
            key = (result.error or "not ok")[:120]
            self.errors[key] = self.errors.get(key, 0) + 1

    @property
    def failed(self) -> int:
        return sum(self.errors.values())


def snapshot(pid: int, label: str, started: float) -> Snapshot:
    process = psutil.Process(pid)
    return Snapshot(label, time.monotonic() - started, process.memory_info().rss, process.num_fds())


def print_snapshot(shot: Snapshot, period: Period | None = None) -> None:
    line = f"{shot.label:<14} {shot.elapsed_s / 60:>6.2f} min   RSS {shot.rss_bytes / 2**20:>7.1f} MiB"
    line += f"   fds {shot.fds:>4}"
    if period is not None:
        ttfts = [r.ttft_s for r in period.results if r.ttft_s is not None]
        p50, p99 = pct(ttfts, 0.5), pct(ttfts, 0.99)
        line += f"   requests {len(period.results):>6}   failed {period.failed:>4}"
        line += f"   TTFT p50 {_ms(p50)}   p99 {_ms(p99)}"
    print(line, flush=True)


def _ms(value: float | None) -> str:
    return f"{value * 1e3:>8.1f} ms" if value is not None else "       - ms"


async def load(
    target: Target, streams: int, max_tokens: int, deadline: float, periods: list[Period], period_s: float,
    started: float,
) -> None:  # fmt: skip
    """`streams` connections sending streamed requests one after another until `deadline` (monotonic)."""
    numbers = itertools.count()

    async def stream(index: int) -> None:
        conn = Connection(target.port)
        try:
            await asyncio.sleep(index * START_SPREAD_S / streams)
            while time.monotonic() < deadline:
                content = f"{PROMPT} (request {next(numbers)})"
                body = json.dumps({"model": target.model, "messages": [{"role": "user", "content": content}],
                                   "max_tokens": max_tokens, "stream": True}).encode()  # fmt: skip
                try:
                    async with asyncio.timeout(REQUEST_TIMEOUT_S):
                        result = await stream_once(conn, target.request("/v1/chat/completions", body))
                except (TimeoutError, OSError) as exc:
                    conn.close()
                    result = Result(error=f"{exc.__class__.__name__}: {exc}")
                index_now = min(int((time.monotonic() - started) / period_s), len(periods) - 1)
                periods[index_now].add(result)
        finally:
            conn.close()

    tasks = [asyncio.create_task(stream(index)) for index in range(streams)]
    try:
        async with asyncio.timeout(max(0.0, deadline - time.monotonic()) + STOP_GRACE_S):
            await asyncio.gather(*tasks)
    except TimeoutError:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        periods[-1].errors["run did not stop within the grace time"] = 1


async def sample_periods(pid: int, periods: list[Period], period_s: float, started: float) -> list[Snapshot]:
    shots = []
    for period in periods:
        await asyncio.sleep(max(0.0, started + (period.index + 1) * period_s - time.monotonic()))
        shot = snapshot(pid, f"period {period.index + 1}", started)
        print_snapshot(shot, period)
        shots.append(shot)
    return shots


def start_synthetic(procs: Processes, home: Path, args: argparse.Namespace) -> tuple[int, Target]:
    engine_port = free_port()
    engine = procs.start("synthetic", [str(VENV_PYTHON), str(SYNTHETIC_ENGINE), "--port", str(engine_port),
                                       "--token-delay-ms", str(args.token_delay_ms)], CLIENT_CPU)  # fmt: skip
    wait_ready(procs, "synthetic", engine, engine_port)
    port = free_port()
    env = {**os.environ, "MODELDECK_API_KEY": API_KEY, "MODELDECK_HOME": str(home)}
    cmd = [str(VENV_PYTHON), "-m", "app", "serve", "--port", str(port), "--max-queue", str(args.streams),
           "--upstream", f"synth=http://127.0.0.1:{engine_port}"]  # fmt: skip
    pid = procs.start("service", cmd, PROXY_CPU, env)
    wait_ready(procs, "service", pid, port)
    return pid, Target("modeldeck", port, "synth", pid)


def start_llama_server(procs: Processes, home: Path, args: argparse.Namespace) -> tuple[int, Target]:
    from app.client import connect
    from app.hub.library import BUNDLED_ID
    from app.installs.available import LLAMA_SERVER_ENV
    from app.paths import app_paths
    from engines.llama_server import installed_builds

    configured = os.environ.get("MODELDECK_TEST_ENGINES")
    root = Path(configured).expanduser() if configured else Path.home() / ".cache" / "modeldeck" / "test-engines"
    builds = installed_builds(root)
    if not builds:
        raise SystemExit(f"no llama-server build in {root} ($MODELDECK_TEST_ENGINES): run installers/test.sh")
    os.environ["MODELDECK_HOME"] = str(home)  # this process finds the service through the same home
    port = free_port()
    env = {**os.environ, "MODELDECK_API_KEY": API_KEY, LLAMA_SERVER_ENV: str(builds[0].executable)}
    cmd = [str(VENV_PYTHON), "-m", "app", "serve", "--port", str(port), "--max-queue", str(args.streams)]
    # The engine is the service's child and inherits its CPU: the service's own CPU is not measured here.
    pid = procs.start("service", cmd, PROXY_CPU, env)
    wait_ready(procs, "service", pid, port)
    client = connect(app_paths())
    if client is None:
        raise SystemExit("the service published no control address")
    state = client.start_model(BUNDLED_ID, wait=True, overrides={"engine": "llama-server", "parallel": args.parallel})
    if state.get("state") != "ready":
        raise SystemExit(f"llama-server did not start: {state.get('message')}")
    return pid, Target("modeldeck", port, BUNDLED_ID, pid)


async def amain(args: argparse.Namespace) -> int:
    os.sched_setaffinity(0, {CLIENT_CPU})
    work = Path(tempfile.mkdtemp(prefix="soak-"))
    procs = Processes(work)
    print("\n".join(machine_facts()), flush=True)
    period_s = args.period_minutes * 60
    count = max(1, round(args.minutes / args.period_minutes))
    print(f"{args.streams} streams for {count} x {args.period_minutes:g} min, engine {args.engine}, "
          f"{args.max_tokens} tokens per request; logs in {work}", flush=True)  # fmt: skip
    try:
        home = work / "home"
        home.mkdir()
        starter = start_synthetic if args.engine == "synthetic" else start_llama_server
        pid, target = starter(procs, home, args)
        started = time.monotonic()
        first = snapshot(pid, "start (idle)", started)
        print_snapshot(first)
        periods = [Period(index) for index in range(count)]
        deadline = started + count * period_s
        sampler = asyncio.create_task(sample_periods(pid, periods, period_s, started))
        await load(target, args.streams, args.max_tokens, deadline, periods, period_s, started)
        shots = await sampler
        await asyncio.sleep(2.0)  # the clients' connections closed: what is left open is the service's own
        after = snapshot(pid, "after the load", started)
        print_snapshot(after)
        if not procs.alive(pid):
            print(f"the service died:\n{procs.log_tail('service')}")
            return 1
    finally:
        procs.stop_all()
    return verdict(first, shots, after, periods, work, args.keep_logs)


def verdict(first: Snapshot, shots: list[Snapshot], after: Snapshot, periods: list[Period], work: Path,
            keep_logs: bool) -> int:  # fmt: skip
    warm, last = shots[0], shots[-1]
    growth = (last.rss_bytes - warm.rss_bytes) / warm.rss_bytes
    from_idle = (last.rss_bytes - first.rss_bytes) / first.rss_bytes
    fds = [shot.fds for shot in shots]
    failed = sum(period.failed for period in periods)
    requests = sum(len(period.results) for period in periods)
    print(f"\nRSS growth, end of period 1 to the end: {100 * growth:+.1f} % (target under "
          f"{100 * RSS_GROWTH_TARGET:.0f} %); from the idle start: {100 * from_idle:+.1f} %")  # fmt: skip
    print(f"fds at the end of each period: {fds} (flat: the last equals the first); idle start {first.fds}, "
          f"after the load {after.fds}")  # fmt: skip
    print(f"requests {requests}, failed {failed}")
    for period in periods:
        for error, count in period.errors.items():
            print(f"  period {period.index + 1}: {count} x {error}")
    met = growth < RSS_GROWTH_TARGET and fds[-1] <= fds[0] and failed == 0 and requests > 0
    load_now = os.getloadavg()
    print(f"load average after: {load_now[0]:.2f} {load_now[1]:.2f} {load_now[2]:.2f}")
    print("targets met" if met else "TARGETS MISSED")
    if not keep_logs:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if met else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=30.0, help="length of the run (30)")
    parser.add_argument("--period-minutes", type=float, default=5.0, help="a report every this often (5)")
    parser.add_argument("--streams", type=int, default=64, help="concurrent streams (64)")
    parser.add_argument("--engine", choices=("synthetic", "llama-server"), default="synthetic")
    parser.add_argument("--max-tokens", type=int, default=None,
                        help="per request (128 on the synthetic engine, 32 on llama-server)")  # fmt: skip
    parser.add_argument("--token-delay-ms", type=float, default=5.0, help="synthetic engine: delay per token (5)")
    parser.add_argument("--parallel", type=int, default=4, help="llama-server: slots (4)")
    parser.add_argument("--keep-logs", action="store_true", help="keep the processes' logs (path printed)")
    args = parser.parse_args(argv)
    if not 0 < args.period_minutes <= args.minutes <= 24 * 60:
        parser.error("--period-minutes and --minutes: 0 < period <= minutes <= 1440")
    if not 1 <= args.streams <= 256 or not 1 <= args.parallel <= 64 or not 0 <= args.token_delay_ms <= 1000:
        parser.error("--streams 1..256, --parallel 1..64, --token-delay-ms 0..1000")
    if args.max_tokens is None:
        args.max_tokens = 128 if args.engine == "synthetic" else 32
    if not 1 <= args.max_tokens <= 4096:
        parser.error("--max-tokens 1..4096")
    return run(amain(args))


if __name__ == "__main__":
    sys.exit(main())
