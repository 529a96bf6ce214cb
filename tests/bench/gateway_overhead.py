"""Benchmark: what ModelDeck's gateway adds in front of an engine, against the engine served directly and LiteLLM.

Run by hand from the repository root (pytest does not collect tests/bench):

    .venv/bin/python tests/bench/gateway_overhead.py --requests 32

LiteLLM is optional and lives in its own virtualenv, never in .venv:

    python3.11 -m venv .bench-venv && .bench-venv/bin/pip install 'litellm[proxy]'

What it measures (see "The proxy stack" in docs/ARCHITECTURE.md):

  - streamed POST /v1/chat/completions through a lean load client written on raw asyncio (no httpx or openai in
    the measuring path): one keep-alive connection per concurrent stream, chunked SSE read by hand, a timestamp
    on every read. Per request: TTFT (send to the first event that carries generated content; role-only chunks
    and comments do not count), inter-token latencies (gaps between content events), content chunks, and
    whether the stream ended with `data: [DONE]`;
  - at each concurrency level the streams start staggered over one stream's duration (measured directly
    beforehand), then each stream sends its next request as soon as the previous one ends, until the level's
    request budget is spent;
  - this process (the client) and the engine run on CPU 0, the proxy on CPU 1 (taskset), so that a proxy
    neither steals the client's core nor is helped by it;
  - the targets of a level are alternated within the same run (direct, ModelDeck, LiteLLM, then the other way
    round; `--rounds`), so a noisy machine weighs on all alike;
  - proxy CPU: user + system time of the proxy's process tree (psutil) before and after each batch, divided
    by the content chunks the client received. Client CPU per chunk is shown too, as a check that the client
    is lean enough not to hide the proxies' cost.

Targets, three sections:

  A. llama.cpp: `python -m llama_cpp.server` on the bundled GGUF, 1 thread, started by hand; direct vs
     ModelDeck (`modeldeck serve --upstream smol=...`). It serves one request at a time, so only concurrency
     1 and 8, few requests (`--llama-requests`), `--llama-max-tokens` (32). Skip with `--skip-llama`.
  B. the synthetic engine (tests/bench/synthetic_engine.py) as fast as it can (`--token-delay-ms` to slow it):
     direct vs ModelDeck vs LiteLLM's proxy (`.bench-venv/bin/litellm`, no master key, which recent releases
     allow only with LITELLM_DANGEROUSLY_PERMIT_WEAK_OR_UNSET_MASTER_KEY; loopback only), at `--concurrency` (1,8,64),
     `--requests` per level and target (at least 2 per stream), `--max-tokens` (128); and `relay`
     (tests/bench/byte_relay.py, `--no-relay` to skip): bytes forwarded both ways on uvloop, no HTTP, no
     measurement, the least any Python proxy can spend. Here the proxy often reads many events at once, so its
     cost per chunk is amortized and throughput shows what it can pump.
  C. the same targets again with the synthetic engine pacing tokens (`--paced-token-delay-ms`, 5; 0 to skip),
     as a real engine does: one event per read, so CPU per chunk is the cost of forwarding one token.

ModelDeck runs twice side by side (`--gateway-servers`): `modeldeck` with its own HTTP server for the
endpoint (app/service/http/http_server.py, streamed chunks relayed in the engine connection's callback) and
`md-uvicorn` with uvicorn, as the endpoint was served before.

Reported per section, concurrency and target: requests (failed or cut), TTFT p50/p99 and the TTFT added to
direct's, ITL p50, throughput in content chunks/s and as % of direct, proxy and client CPU per chunk; then
the LiteLLM / ModelDeck ratios of added TTFT and CPU per chunk, and LiteLLM / relay next to them: the ratio
that no Python gateway can beat on this machine (ModelDeck / relay says how far ModelDeck is from it). With a
few dozen requests p99 is close to the maximum: read it as "the tail", not as a precise percentile.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import platform
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import psutil
from synthetic_engine import run  # run as a script beside it

REPO = Path(__file__).resolve().parents[2]
VENV_PYTHON = REPO / ".venv" / "bin" / "python"
LITELLM_BIN = REPO / ".bench-venv" / "bin" / "litellm"
SYNTHETIC_ENGINE = Path(__file__).resolve().parent / "synthetic_engine.py"
BYTE_RELAY = Path(__file__).resolve().parent / "byte_relay.py"
API_KEY = "bench-key"
CLIENT_CPU, PROXY_CPU = 0, 1
READY_TIMEOUT_S = 120.0
STOP_GRACE_S = 10.0
REQUEST_TIMEOUT_S = 120.0
PROMPT = "Write a long, detailed essay about the history of the city of Rome, from its founding to the modern day."
# An SSE event whose content or text is not empty (as the gateway's own meter and `vllm bench serve` count).
CONTENT = re.compile(rb'"(?:content|text)": ?"(?:[^"\\]|\\.)')
DONE = b"data: [DONE]"
DIRECT, MODELDECK, MODELDECK_UVICORN, RELAY, LITELLM = "direct", "modeldeck", "md-uvicorn", "relay", "litellm"
# ModelDeck with each HTTP server for its endpoint (`serve --gateway-server`): its own, and uvicorn to compare.
GATEWAY_SERVERS = {MODELDECK: "own", MODELDECK_UVICORN: "uvicorn"}


# ---------------------------------------------------------------------------------------------------------------
# The load client


@dataclass
class Result:
    ok: bool = False
    status: int = 0
    ttft_s: float | None = None
    itls_s: list[float] = field(default_factory=list)
    chunks: int = 0
    done: bool = False
    error: str | None = None


@dataclass(frozen=True)
class Target:
    name: str
    port: int
    model: str
    pid: int | None  # the proxy's process, whose tree's CPU is counted; None for direct

    def request(self, path: str, body: bytes) -> bytes:
        head = (
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\nAuthorization: Bearer {API_KEY}\r\n"
            f"Content-Type: application/json\r\nAccept: text/event-stream\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        return head.encode() + body


class Connection:
    """One keep-alive HTTP/1.1 connection to a target, reopened when the server closed it."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> None:
        self.close()
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port, limit=1 << 20)
        sock = self.writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


async def stream_once(conn: Connection, request: bytes) -> Result:
    """Send one streamed request and read its answer, timestamping every read."""
    result = Result()
    for attempt in (0, 1):  # a reused connection the server closed meanwhile is reopened once
        if conn.writer is None:
            await conn.open()
        assert conn.reader is not None and conn.writer is not None
        reader = conn.reader
        sent = time.perf_counter()
        conn.writer.write(request)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            break
        except (asyncio.IncompleteReadError, ConnectionError):
            conn.close()
            if attempt:
                result.error = "connection closed before the answer"
                return result
    lines = head[:-4].split(b"\r\n")
    result.status = int(lines[0].split(b" ", 2)[1])
    headers: dict[bytes, bytes] = {}
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip()
    keep_alive = headers.get(b"connection", b"").lower() != b"close"
    chunked = b"chunked" in headers.get(b"transfer-encoding", b"").lower()
    length = int(headers[b"content-length"]) if b"content-length" in headers else None
    if result.status != 200:
        body = await _read_whole(reader, chunked, length)
        result.error = f"HTTP {result.status}: {body[:200]!r}"
        if not keep_alive:
            conn.close()
        return result

    buf = b""
    last: float | None = None
    itls = result.itls_s
    content = CONTENT.search
    remaining = length

    def feed(data: bytes, now: float) -> None:
        nonlocal buf, last
        buf += data
        end = buf.rfind(b"\n\n")
        if end < 0:
            return
        complete, buf = buf[:end], buf[end + 2 :]
        for event in complete.split(b"\n\n"):
            if event.startswith(b"data: [DONE]") or event.startswith(b"data:[DONE]"):
                result.done = True
            elif content(event) is not None:
                result.chunks += 1
                if last is None:
                    result.ttft_s = now - sent
                else:
                    itls.append(now - last)
                last = now
            elif b'"error"' in event and result.error is None:
                result.error = "error event: " + event[:200].decode("utf-8", "replace")

    try:
        if chunked:
            while True:
                size = int((await reader.readuntil(b"\r\n")).split(b";", 1)[0], 16)
                if size == 0:
                    await reader.readuntil(b"\r\n")
                    break
                data = await reader.readexactly(size + 2)
                feed(data[:-2], time.perf_counter())
        else:
            while remaining is None or remaining > 0:
                data = await reader.read(65536 if remaining is None else min(remaining, 65536))
                if not data:
                    keep_alive = False
                    break
                if remaining is not None:
                    remaining -= len(data)
                feed(data, time.perf_counter())
    except (asyncio.IncompleteReadError, ConnectionError, ValueError) as exc:
        result.error = f"stream cut: {exc.__class__.__name__}"
        conn.close()
        return result
    if not keep_alive:
        conn.close()
    if not result.done and result.error is None:
        result.error = "stream ended without [DONE]"
    result.ok = result.done and result.error is None and result.chunks > 0
    return result


async def _read_whole(reader: asyncio.StreamReader, chunked: bool, length: int | None) -> bytes:
    if chunked:
        parts: list[bytes] = []
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";", 1)[0], 16)
            if size == 0:
                await reader.readuntil(b"\r\n")
                return b"".join(parts)
            parts.append((await reader.readexactly(size + 2))[:-2])
    if length is not None:
        return await reader.readexactly(length)
    return await reader.read(65536)


@dataclass
class Batch:
    target: str
    results: list[Result]
    wall_s: float
    proxy_cpu_s: float | None
    client_cpu_s: float
    timed_out: bool = False


def tree_cpu_s(pid: int | None) -> float | None:
    if pid is None:
        return None
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return None
    total = 0.0
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            times = proc.cpu_times()
            total += times.user + times.system
    return total


def self_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def run_batch(
    target: Target, path: str, body: bytes, concurrency: int, requests: int, stagger_s: float, timeout_s: float
) -> Batch:
    """`requests` streamed requests over `concurrency` keep-alive connections, their starts staggered."""
    request = target.request(path, body)
    results: list[Result] = []
    left = requests

    async def worker(index: int) -> None:
        nonlocal left
        conn = Connection(target.port)
        try:
            await asyncio.sleep(index * stagger_s / concurrency)
            while left > 0:
                left -= 1
                try:
                    async with asyncio.timeout(REQUEST_TIMEOUT_S):
                        results.append(await stream_once(conn, request))
                except (TimeoutError, OSError) as exc:
                    conn.close()
                    results.append(Result(error=f"{exc.__class__.__name__}: {exc}"))
        finally:
            conn.close()

    cpu_before, client_before = tree_cpu_s(target.pid), self_cpu_s()
    started = time.perf_counter()
    tasks = [asyncio.create_task(worker(i)) for i in range(min(concurrency, requests))]
    timed_out = False
    try:
        async with asyncio.timeout(timeout_s):
            await asyncio.gather(*tasks)
    except TimeoutError:
        timed_out = True
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    wall = time.perf_counter() - started
    cpu_after, client_after = tree_cpu_s(target.pid), self_cpu_s()
    proxy_cpu = cpu_after - cpu_before if cpu_before is not None and cpu_after is not None else None
    return Batch(target.name, results, wall, proxy_cpu, client_after - client_before, timed_out)


# ---------------------------------------------------------------------------------------------------------------
# Processes


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Processes:
    """Everything this benchmark starts, stopped (process tree, then group) however the run ends."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.logs: dict[str, Path] = {}
        self._started = 0

    def start(self, name: str, cmd: Sequence[str], cpu: int, env: dict[str, str] | None = None) -> int:
        self._started += 1
        self.logs[name] = path = self.log_dir / f"{self._started:02d}-{name}.log"
        log = open(path, "wb")  # noqa: SIM115 - the child owns it
        taskset = shutil.which("taskset")
        full = [taskset, "-c", str(cpu), *cmd] if taskset else list(cmd)
        proc = subprocess.Popen(
            full, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO,
            start_new_session=True,
        )  # fmt: skip
        log.close()
        if not taskset:  # pinned a moment late, before it does any work that counts
            with contextlib.suppress(OSError):
                os.sched_setaffinity(proc.pid, {cpu})
        self.procs.append((name, proc))
        return proc.pid

    def log_tail(self, name: str, lines: int = 15) -> str:
        try:
            return "\n".join(self.logs[name].read_text(errors="replace").splitlines()[-lines:])
        except (OSError, KeyError):
            return ""

    def alive(self, pid: int) -> bool:
        return any(proc.pid == pid and proc.poll() is None for _, proc in self.procs)

    def stop(self, pid: int) -> None:
        for name, proc in list(self.procs):
            if proc.pid == pid:
                _stop(proc)
                self.procs.remove((name, proc))

    def stop_all(self) -> None:
        for _, proc in reversed(self.procs):
            _stop(proc)
        self.procs.clear()


def _stop(proc: subprocess.Popen[bytes]) -> None:
    try:
        children = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        children = []
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(STOP_GRACE_S)
    for child in children:
        with contextlib.suppress(psutil.NoSuchProcess):
            child.terminate()
    _, alive = psutil.wait_procs(children, timeout=STOP_GRACE_S)
    for child in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            child.kill()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # anything left in its session


def wait_ready(procs: Processes, name: str, pid: int, port: int, timeout_s: float = READY_TIMEOUT_S) -> float:
    """Poll GET /v1/models (with the key) until 200; seconds it took. Raises if the process dies or times out."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback only, never a proxy
    url = f"http://127.0.0.1:{port}/v1/models"
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if not procs.alive(pid):
            raise RuntimeError(f"{name} exited before it was ready:\n{procs.log_tail(name)}")
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {API_KEY}"})
        try:
            with opener.open(request, timeout=2) as answer:
                if answer.status == 200:
                    return time.monotonic() - started
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{name} not ready within {timeout_s:.0f} s:\n{procs.log_tail(name)}")


def start_modeldeck(
    procs: Processes, home: Path, model_id: str, upstream_port: int, name: str = MODELDECK
) -> tuple[int, int]:
    port = free_port()
    home = home / name
    home.mkdir()
    env = {**os.environ, "MODELDECK_API_KEY": API_KEY, "MODELDECK_HOME": str(home)}
    cmd = [str(VENV_PYTHON), "-m", "app", "serve", "--port", str(port), "--gateway-server", GATEWAY_SERVERS[name],
           "--upstream", f"{model_id}=http://127.0.0.1:{upstream_port}"]  # fmt: skip
    pid = procs.start(name, cmd, PROXY_CPU, env)
    try:
        wait_ready(procs, name, pid, port)
    except RuntimeError:
        procs.stop(pid)
        raise
    return pid, port


def start_modeldecks(
    procs: Processes, home: Path, model_id: str, upstream_port: int, names: Sequence[str]
) -> list[Target]:
    targets = []
    for name in names:
        pid, port = start_modeldeck(procs, home, model_id, upstream_port, name)
        targets.append(Target(name, port, model_id, pid))
    return targets


def start_relay(procs: Processes, upstream_port: int) -> Target:
    port = free_port()
    cmd = [str(VENV_PYTHON), str(BYTE_RELAY), "--port", str(port), "--upstream-port", str(upstream_port)]
    pid = procs.start(RELAY, cmd, PROXY_CPU)
    try:
        wait_ready(procs, RELAY, pid, port)  # the engine's /v1/models, through the relay
    except RuntimeError:
        procs.stop(pid)
        raise
    return Target(RELAY, port, "synth", pid)


def start_litellm(procs: Processes, work: Path, upstream_port: int) -> tuple[int, int]:
    port = free_port()
    config = work / "litellm.yaml"
    config.write_text(
        "model_list:\n"
        "  - model_name: synth\n"
        "    litellm_params:\n"
        "      model: openai/synth\n"
        f"      api_base: http://127.0.0.1:{upstream_port}/v1\n"
        "      api_key: x\n"
        "litellm_settings:\n"
        "  telemetry: false\n"
    )
    env = {
        **os.environ,
        "LITELLM_LOG": "ERROR",
        "LITELLM_TELEMETRY": "False",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        # No master key, as measured for docs/ARCHITECTURE.md, "The proxy stack" (loopback only); recent LiteLLM
        # refuses to start without this.
        "LITELLM_DANGEROUSLY_PERMIT_WEAK_OR_UNSET_MASTER_KEY": "true",
        "DISABLE_ADMIN_UI": "True",
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        env.pop(name, None)
    cmd = [str(LITELLM_BIN), "--config", str(config), "--host", "127.0.0.1", "--port", str(port), "--num_workers", "1"]
    pid = procs.start(LITELLM, cmd, PROXY_CPU, env)
    try:
        wait_ready(procs, LITELLM, pid, port, timeout_s=180.0)
    except RuntimeError:
        procs.stop(pid)
        raise
    return pid, port


# ---------------------------------------------------------------------------------------------------------------
# Statistics and report


def pct(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


@dataclass
class Summary:
    section: str
    concurrency: int
    target: str
    requests: int = 0
    failed: int = 0
    chunks: int = 0
    wall_s: float = 0.0
    proxy_cpu_s: float | None = None
    client_cpu_s: float = 0.0
    ttfts: list[float] = field(default_factory=list)
    itls: list[float] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    timed_out: int = 0

    def add(self, batch: Batch) -> None:
        self.requests += len(batch.results)
        self.wall_s += batch.wall_s
        self.client_cpu_s += batch.client_cpu_s
        self.timed_out += batch.timed_out
        if batch.proxy_cpu_s is not None:
            self.proxy_cpu_s = (self.proxy_cpu_s or 0.0) + batch.proxy_cpu_s
        for result in batch.results:
            self.chunks += result.chunks
            if not result.ok:
                self.failed += 1
                key = (result.error or "not ok")[:120]
                self.errors[key] = self.errors.get(key, 0) + 1
            if result.ttft_s is not None:
                self.ttfts.append(result.ttft_s)
            self.itls.extend(result.itls_s)

    @property
    def throughput(self) -> float:
        return self.chunks / self.wall_s if self.wall_s else 0.0

    def proxy_us_per_chunk(self) -> float | None:
        return self.proxy_cpu_s / self.chunks * 1e6 if self.proxy_cpu_s is not None and self.chunks else None


def _ms(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value * 1e3:+.2f}" if signed else f"{value * 1e3:.2f}"


def _ms3(value: float | None) -> str:
    return "-" if value is None else f"{value * 1e3:.3f}"


def _diff(a: float | None, b: float | None) -> float | None:
    return a - b if a is not None and b is not None else None


def _ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or b <= 0:
        return "-"
    return f"{a / b:.1f}x"


def report(summaries: list[Summary]) -> None:
    header = (f"{'section':<10} {'conc':>4} {'target':<10} {'req':>4} {'fail':>4} {'chunks':>7} "
              f"{'TTFT p50':>9} {'TTFT p99':>9} {'+p50':>8} {'+p99':>8} {'ITL p50':>8} "
              f"{'chunks/s':>9} {'% dir':>6} {'proxy us/ch':>11} {'client us/ch':>12}")  # fmt: skip
    print("\nTimes in ms; +p50/+p99 = TTFT added to direct's; % dir = throughput as % of direct.")
    print(header)
    print("-" * len(header))
    keyed = {(s.section, s.concurrency, s.target): s for s in summaries}
    for s in summaries:
        direct = keyed.get((s.section, s.concurrency, DIRECT))
        p50, p99 = pct(s.ttfts, 0.5), pct(s.ttfts, 0.99)
        add50 = _diff(p50, pct(direct.ttfts, 0.5)) if direct and s.target != DIRECT else None
        add99 = _diff(p99, pct(direct.ttfts, 0.99)) if direct and s.target != DIRECT else None
        share = f"{100 * s.throughput / direct.throughput:.0f}" if direct and direct.throughput else "-"
        proxy, client = s.proxy_us_per_chunk(), (s.client_cpu_s / s.chunks * 1e6 if s.chunks else None)
        proxy_text = "-" if proxy is None else f"{proxy:.1f}"
        client_text = "-" if client is None else f"{client:.1f}"
        print(f"{s.section:<10} {s.concurrency:>4} {s.target:<10} {s.requests:>4} {s.failed:>4} {s.chunks:>7} "
              f"{_ms(p50):>9} {_ms(p99):>9} {_ms(add50, True):>8} {_ms(add99, True):>8} "
              f"{_ms3(pct(s.itls, 0.5)):>8} {s.throughput:>9.0f} {share:>6} "
              f"{proxy_text:>11} {client_text:>12}")  # fmt: skip
    pairs = ((LITELLM, MODELDECK), (LITELLM, RELAY), (LITELLM, MODELDECK_UVICORN), (MODELDECK_UVICORN, MODELDECK),
             (MODELDECK, RELAY))  # fmt: skip
    for slower, faster in pairs:
        ratios = _ratios(summaries, keyed, slower, faster)
        if ratios:
            print(f"\n{slower} / {faster} (a '-' where {faster} added nothing measurable):")
            print("\n".join(ratios))
    problems = [(s, e, n) for s in summaries for e, n in s.errors.items()]
    if problems or any(s.timed_out for s in summaries):
        print("\nFailures (failed, cut or incomplete streams):")
        for s, error, count in problems:
            print(f"  {s.section} c={s.concurrency} {s.target}: {count} x {error}")
        for s in summaries:
            if s.timed_out:
                print(f"  {s.section} c={s.concurrency} {s.target}: {s.timed_out} batch(es) hit the batch time limit")


def _ratios(
    summaries: list[Summary], keyed: dict[tuple[str, int, str], Summary], slower: str, faster: str
) -> list[str]:
    ratios = []
    for s in summaries:
        if s.target != slower:
            continue
        md, direct = keyed.get((s.section, s.concurrency, faster)), keyed.get((s.section, s.concurrency, DIRECT))
        if md is None or direct is None:
            continue
        d50, d99 = pct(direct.ttfts, 0.5), pct(direct.ttfts, 0.99)
        ratios.append(
            f"{s.section:<10} {s.concurrency:>4}   added TTFT p50 "
            f"{_ratio(_diff(pct(s.ttfts, 0.5), d50), _diff(pct(md.ttfts, 0.5), d50)):>8}   added TTFT p99 "
            f"{_ratio(_diff(pct(s.ttfts, 0.99), d99), _diff(pct(md.ttfts, 0.99), d99)):>8}   CPU per chunk "
            f"{_ratio(s.proxy_us_per_chunk(), md.proxy_us_per_chunk()):>8}"
        )
    return ratios


def machine_facts() -> list[str]:
    def version(dist: str) -> str:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return "-"

    litellm = "-"
    if LITELLM_BIN.exists():
        probe = subprocess.run(
            [str(LITELLM_BIN.parent / "python"), "-c", "import importlib.metadata as m; print(m.version('litellm'))"],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        litellm = probe.stdout.strip() or "-"
    load = os.getloadavg()
    return [
        f"machine: {platform.machine()} {platform.system()} {platform.release()}, {os.cpu_count()} logical CPUs, "
        f"{psutil.cpu_count(logical=False)} physical, {psutil.virtual_memory().total / 2**30:.1f} GiB RAM",
        f"cpu: {_cpu_model()}",
        f"load average: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}",
        f"python {platform.python_version()}; uvicorn {version('uvicorn')}, uvloop {version('uvloop')}, "
        f"httptools {version('httptools')}, aiohttp {version('aiohttp')}, llama-cpp-python "
        f"{version('llama_cpp_python')}, litellm {litellm}",
    ]


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "?"


# ---------------------------------------------------------------------------------------------------------------
# The run


def chat_body(model: str, max_tokens: int) -> bytes:
    payload = {"model": model, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": max_tokens,
               "temperature": 0, "stream": True}  # fmt: skip
    return json.dumps(payload).encode()


async def measure_section(
    section: str,
    targets: list[Target],
    levels: Sequence[int],
    requests: int,
    per_stream: int,
    max_tokens: int,
    rounds: int,
    batch_timeout_s: float,
) -> list[Summary]:
    path = "/v1/chat/completions"
    bodies = {t.name: chat_body(t.model, max_tokens) for t in targets}
    # Warm-up, untimed: connections, imports on first use, caches. Also times one direct stream for the stagger.
    for target in targets:
        await run_batch(target, path, bodies[target.name], 2, 2, 0.0, batch_timeout_s)
    probe = await run_batch(targets[0], path, bodies[targets[0].name], 1, 3, 0.0, batch_timeout_s)
    stream_s = probe.wall_s / 3
    print(f"[{section}] one direct stream of {max_tokens} tokens takes about {stream_s * 1e3:.1f} ms", flush=True)
    summaries: list[Summary] = []
    for level in levels:
        per_round = max(math.ceil(requests / rounds), level * per_stream)
        level_summaries = {t.name: Summary(section, level, t.name) for t in targets}
        for round_index in range(rounds):
            order = targets if round_index % 2 == 0 else list(reversed(targets))
            for target in order:
                batch = await run_batch(target, path, bodies[target.name], level, per_round, stream_s, batch_timeout_s)
                level_summaries[target.name].add(batch)
                failed = sum(not r.ok for r in batch.results)
                print(f"[{section}] c={level:<3} round {round_index + 1}/{rounds} {target.name:<10} "
                      f"{len(batch.results)} req, {failed} failed, {batch.wall_s:.2f} s", flush=True)  # fmt: skip
        summaries.extend(level_summaries[t.name] for t in targets)
    return summaries


async def amain(args: argparse.Namespace) -> int:
    os.sched_setaffinity(0, {CLIENT_CPU})  # engines started from here inherit it too (and taskset says it)
    work = Path(tempfile.mkdtemp(prefix="gateway-bench-"))
    procs = Processes(work)
    facts = machine_facts()
    print("\n".join(facts), flush=True)
    print(f"client and engine on CPU {CLIENT_CPU}, proxy on CPU {PROXY_CPU}; logs in {work}", flush=True)
    notes: list[str] = []
    summaries: list[Summary] = []
    started = time.monotonic()
    try:
        if not args.skip_llama:
            summaries += await _llama_section(args, procs, work, notes)
        delays = [args.token_delay_ms]
        if args.paced_token_delay_ms > 0 and args.paced_token_delay_ms != args.token_delay_ms:
            delays.append(args.paced_token_delay_ms)
        for delay in delays:
            summaries += await _synthetic_section(args, delay, procs, work, notes)
    finally:
        procs.stop_all()
    report(summaries)
    load = os.getloadavg()
    print(f"\nload average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; total {time.monotonic() - started:.0f} s")
    for note in notes:
        print(f"note: {note}")
    if not args.keep_logs:
        shutil.rmtree(work, ignore_errors=True)
    return 0


async def _llama_section(args: argparse.Namespace, procs: Processes, work: Path, notes: list[str]) -> list[Summary]:
    from app.hub.library import bundled_model

    model = bundled_model()
    if model is None or model.path is None or not Path(model.path).exists():
        notes.append("no bundled model: llama.cpp section skipped")
        return []
    port = free_port()
    cmd = [str(VENV_PYTHON), "-m", "llama_cpp.server", "--model", str(model.path), "--host", "127.0.0.1",
           "--port", str(port), "--n_threads", "1", "--interrupt_requests", "false"]  # fmt: skip
    engine = procs.start("llama", cmd, CLIENT_CPU)
    try:
        wait_ready(procs, "llama", engine, port)
        home = work / "home-llama"
        home.mkdir()
        proxies = []
        try:
            proxies = start_modeldecks(procs, home, "smol", port, args.gateway_servers)
            targets = [Target(DIRECT, port, "smol", None), *proxies]
            return await measure_section("llama.cpp", targets, [c for c in args.concurrency if c <= 8],
                                         args.llama_requests, 1, args.llama_max_tokens, args.rounds,
                                         args.batch_timeout)  # fmt: skip
        finally:
            for proxy in proxies:
                assert proxy.pid is not None
                _check_exit(procs, proxy.name, proxy.pid, notes, "llama.cpp")
                procs.stop(proxy.pid)
    finally:
        procs.stop(engine)


async def _synthetic_section(
    args: argparse.Namespace, delay_ms: float, procs: Processes, work: Path, notes: list[str]
) -> list[Summary]:
    section = "synthetic" if not delay_ms else f"synth{delay_ms:g}ms"
    port = free_port()
    cmd = [str(VENV_PYTHON), str(SYNTHETIC_ENGINE), "--port", str(port), "--token-delay-ms", str(delay_ms)]
    engine = procs.start("synthetic", cmd, CLIENT_CPU)
    try:
        wait_ready(procs, "synthetic", engine, port)
        home = work / f"home-{section}"
        home.mkdir()
        targets = [Target(DIRECT, port, "synth", None), *start_modeldecks(procs, home, "synth", port,
                                                                          args.gateway_servers)]  # fmt: skip
        if args.relay:
            targets.append(start_relay(procs, port))
        if args.skip_litellm:
            notes.append(f"[{section}] LiteLLM skipped (--skip-litellm)")
        elif not LITELLM_BIN.exists():
            notes.append(f"[{section}] LiteLLM not installed ({LITELLM_BIN} missing): reported without it")
        else:
            try:
                ll_pid, ll_port = start_litellm(procs, work, port)
                targets.append(Target(LITELLM, ll_port, "synth", ll_pid))
            except RuntimeError as exc:
                notes.append(f"[{section}] LiteLLM could not be run, reported without it: {exc}")
        return await measure_section(section, targets, args.concurrency, args.requests, 2, args.max_tokens,
                                     args.rounds, args.batch_timeout)  # fmt: skip
    finally:
        for name, proc in list(procs.procs):
            if name in (*GATEWAY_SERVERS, RELAY, LITELLM):
                _check_exit(procs, name, proc.pid, notes, section)
                procs.stop(proc.pid)
        procs.stop(engine)


def _check_exit(procs: Processes, name: str, pid: int, notes: list[str], section: str) -> None:
    if not procs.alive(pid):
        notes.append(f"[{section}] {name} died during the run:\n{procs.log_tail(name)}")
        return
    tail = procs.log_tail(name, 200)
    suspicious = [line for line in tail.splitlines() if re.search(r"ERROR|Traceback|Exception|WARNING", line)]
    if suspicious:
        notes.append(f"[{section}] {name} logged {len(suspicious)} warning/error lines, last: {suspicious[-1][:300]}")


def _levels(text: str) -> list[int]:
    try:
        levels = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a list like 1,8,64, got {text!r}") from None
    if not levels or min(levels) < 1 or max(levels) > 256:
        raise argparse.ArgumentTypeError("concurrency levels must be between 1 and 256")
    return levels


def _servers(text: str) -> list[str]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    if not names or any(name not in GATEWAY_SERVERS for name in names):
        raise argparse.ArgumentTypeError(f"expected some of {', '.join(GATEWAY_SERVERS)}, got {text!r}")
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=_levels, default=[1, 8, 64], help="levels, comma-separated (1,8,64)")
    parser.add_argument("--requests", type=int, default=64, help="synthetic: requests per level and target (64)")
    parser.add_argument("--max-tokens", type=int, default=128, help="synthetic: max_tokens per request (128)")
    parser.add_argument("--token-delay-ms", type=float, default=0.0, help="synthetic engine: delay per token (0)")
    parser.add_argument(
        "--paced-token-delay-ms", type=float, default=5.0,
        help="then the synthetic engine again at this delay per token, one event per read as from a real engine "
        "(5; 0 to skip)",
    )  # fmt: skip
    parser.add_argument("--llama-requests", type=int, default=8, help="llama.cpp: requests per level and target (8)")
    parser.add_argument("--llama-max-tokens", type=int, default=32, help="llama.cpp: max_tokens per request (32)")
    parser.add_argument("--rounds", type=int, default=2, help="alternations of the targets per level (2)")
    parser.add_argument("--batch-timeout", type=float, default=120.0, help="limit for one batch, seconds (120)")
    parser.add_argument(
        "--gateway-servers", type=_servers, default=list(GATEWAY_SERVERS),
        help="ModelDeck targets, by the HTTP server of its endpoint: modeldeck (its own), md-uvicorn (both)",
    )  # fmt: skip
    parser.add_argument("--skip-llama", action="store_true", help="only the synthetic engine")
    parser.add_argument("--skip-litellm", action="store_true", help="no LiteLLM target")
    parser.add_argument(
        "--relay", action=argparse.BooleanOptionalAction, default=True,
        help="synthetic: the byte relay (tests/bench/byte_relay.py) as a target, the floor of a Python proxy",
    )  # fmt: skip
    parser.add_argument("--keep-logs", action="store_true", help="keep the servers' logs (path printed)")
    args = parser.parse_args(argv)
    if not 1 <= args.requests <= 4096 or not 1 <= args.llama_requests <= 256 or not 1 <= args.rounds <= 10:
        parser.error("--requests 1..4096, --llama-requests 1..256, --rounds 1..10")
    if not 1 <= args.max_tokens <= 4096 or not 1 <= args.llama_max_tokens <= 512:
        parser.error("--max-tokens 1..4096, --llama-max-tokens 1..512")
    return run(amain(args))


if __name__ == "__main__":
    sys.exit(main())
