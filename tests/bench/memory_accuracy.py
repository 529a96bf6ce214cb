"""Benchmark: the memory model's prediction against the resident memory the llama.cpp engines really use.

Run by hand from the repository root (pytest does not collect tests/bench):

    .venv/bin/python tests/bench/memory_accuracy.py [--engines llama-cpp-python,llama-server] [--parallel 1,4]
        [--contexts 512,2048,8192] [--fill 0.9] [--llama-server PATH]

For each engine, slot count (llama-server only; llama-cpp-python has one) and context, the engine is started with
the command ModelDeck would run (the engine's adapter and the default plan at that context and slot count), on the
bundled model. Resident memory (RSS of the engine process) is read once it is ready, and again after prompts that
fill `--fill` of the context, one per slot at once, each with its own start so that no cache serves it: the worst
case the planner must cover, since that is when the compute buffers are touched. The prediction is what the service
predicts for that engine and plan (`app.planner.memory.plan_memory`; for llama-cpp-python plus the one entry of its
prompt cache that the run's answer leaves, `prompt_cache_state_bytes`, which the service counts in the plan's cache
allowance) with the model's built-in runtime figure ("uncalibrated"), and with the calibration correction learned
leave-one-out from the other contexts of the same engine and slot count ("calibrated": what a user's second launch
would be told). Target: |error| <= 5 % at every context, at load and after the prompts. llama-server is found at
`--llama-server`, else in $MODELDECK_TEST_ENGINES (where installers/test.sh builds it).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from app.hub.library import BUNDLED_ID, bundled_model
from app.planner.defaults import default_plan, prompt_cache_bytes, prompt_cache_state_bytes
from app.planner.facts import facts_from_gguf
from app.planner.memory import plan_memory
from engines.base import Engine, EngineCommand, LaunchPlan
from engines.gguf import read_gguf_info
from engines.llama_cpp import LlamaCppPythonEngine
from engines.llama_server import LlamaServerEngine, installed_builds
from engines.processes import free_loopback_port

MIB = 2**20
KEY = "bench-key"


@dataclass(frozen=True)
class Point:
    engine: str
    parallel: int
    context: int
    predicted: int
    predicted_at_load: int
    ready: int
    after: int
    prompt_tokens: int


def _call(url: str, body: dict[str, object] | None, timeout: float) -> dict[str, object]:
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"}
    with urllib.request.urlopen(urllib.request.Request(url, data, headers), timeout=timeout) as answer:
        result: dict[str, object] = json.loads(answer.read())
        return result


def _wait_ready(url: str, process: subprocess.Popen[bytes], deadline: float) -> None:
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"engine exited with {process.returncode}")
        try:
            _call(url, None, 2)
            return
        except (urllib.error.URLError, OSError, ValueError):
            time.sleep(0.2)
    raise SystemExit("engine not ready in time")


def _count_llama_cpp_python(base: str, text: str) -> int:
    count = _call(f"{base}/extras/tokenize/count", {"input": text}, 60)["count"]
    assert isinstance(count, int)
    return count


def _count_llama_server(base: str, text: str) -> int:
    tokens = _call(f"{base}/tokenize", {"content": text}, 60)["tokens"]
    assert isinstance(tokens, list)
    return len(tokens)


COUNTERS: dict[str, Callable[[str, str], int]] = {
    "llama-cpp-python": _count_llama_cpp_python,
    "llama-server": _count_llama_server,
}


def _prompt(base: str, engine: str, index: int, tokens: int) -> tuple[str, int]:
    """About `tokens` tokens of text that no other prompt of the run starts with (no cache may serve it)."""
    head = f"Request {index}:"
    words = tokens
    counted = COUNTERS[engine](base, head + " hello" * words)
    words = max(1, words * tokens // max(counted, 1))
    text = head + " hello" * words
    return text, COUNTERS[engine](base, text)


def measure(engine: Engine, parallel: int, context: int, fill: float, log_dir: Path) -> Point:
    spec = bundled_model()
    assert spec is not None and spec.path is not None, "the bundled model is not installed"
    info = read_gguf_info(spec.path)
    facts = facts_from_gguf(info)
    plan: LaunchPlan = dataclasses.replace(default_plan(BUNDLED_ID, info), context_length=context, parallel=parallel)
    cache_entry = 0
    if plan.prompt_cache_bytes:  # llama-cpp-python: its prompt cache, sized for this context as a start would
        plan = dataclasses.replace(plan, prompt_cache_bytes=prompt_cache_bytes(facts, context, plan.batch_size))
        # the run's answer leaves one entry in it, which the service counts (in the plan's cache allowance)
        cache_entry = min(prompt_cache_state_bytes(facts, context, plan.batch_size) or 0, plan.prompt_cache_bytes)
    estimate = plan_memory(engine.name, facts, plan)
    port = free_loopback_port()
    command: EngineCommand = engine.build_command(plan, port, KEY)
    log = (log_dir / f"{engine.name}-p{parallel}-c{context}.log").open("wb")
    process = subprocess.Popen(command.argv, env={**os.environ, **command.env}, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(base + command.ready_path, process, time.monotonic() + 120)
        rss = psutil.Process(process.pid).memory_info
        ready = rss().rss
        prompts = [_prompt(base, engine.name, i, int(context * fill / parallel)) for i in range(parallel)]
        failures: list[BaseException] = []

        def complete(text: str) -> None:
            try:
                _call(f"{base}/v1/completions", {"prompt": text, "max_tokens": 8, "model": BUNDLED_ID}, 1800)
            except (urllib.error.URLError, OSError) as exc:
                failures.append(exc)

        threads = [threading.Thread(target=complete, args=(text,)) for text, _ in prompts]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if failures:
            raise SystemExit(f"a completion failed: {failures[0]}")
        after = rss().rss
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()
    tokens = sum(count for _, count in prompts)
    return Point(engine.name, parallel, context, estimate.ram + cache_entry, estimate.ram_at_load, ready, after, tokens)


def _report(points: list[Point]) -> float:
    print(
        f"{'engine':>16} {'slots':>5} {'context':>7} {'prompt':>6} | {'at load':>7} {'measured':>8} {'error':>7} "
        f"| {'peak':>7} {'measured':>8} {'error':>7} {'calibrated':>10}"
    )
    worst = 0.0
    for point in points:
        # calibration learns the runtime at load, from the other contexts of this engine and slot count
        group = [p for p in points if (p.engine, p.parallel) == (point.engine, point.parallel)]
        others = [p.ready - p.predicted_at_load for p in group if p is not point]
        correction = statistics.median(others) if others else 0
        load_error = (point.predicted_at_load - point.ready) / point.ready
        error = (point.predicted - point.after) / point.after
        calibrated = (point.predicted + correction - point.after) / point.after
        worst = max(worst, abs(error), abs(load_error))
        print(
            f"{point.engine:>16} {point.parallel:>5} {point.context:>7} {point.prompt_tokens:>6} | "
            f"{point.predicted_at_load / MIB:>7.1f} {point.ready / MIB:>8.1f} {load_error:>+7.1%} | "
            f"{point.predicted / MIB:>7.1f} {point.after / MIB:>8.1f} {error:>+7.1%} {calibrated:>+10.1%}"
        )
    return worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engines", default="llama-cpp-python,llama-server")
    parser.add_argument("--parallel", default="1,4", help="llama-server slot counts (1,4)")
    parser.add_argument("--contexts", default="512,2048,8192")
    parser.add_argument("--fill", type=float, default=0.9, help="share of the context the prompts fill (0.9)")
    parser.add_argument("--llama-server", type=Path, default=None, help="the executable (default: the test build)")
    parser.add_argument("--logs", type=Path, default=Path("/tmp/modeldeck-memory-bench"))
    args = parser.parse_args()
    args.logs.mkdir(parents=True, exist_ok=True)
    builds = Path(os.environ.get("MODELDECK_TEST_ENGINES", Path.home() / ".cache" / "modeldeck" / "test-engines"))
    server = args.llama_server or next((b.executable for b in installed_builds(builds)), None)
    engines: dict[str, Engine] = {"llama-cpp-python": LlamaCppPythonEngine()}
    if server is not None:
        engines["llama-server"] = LlamaServerEngine(configured=server)
    points: list[Point] = []
    for name in args.engines.split(","):
        if name not in engines:
            raise SystemExit(f"{name}: not found (llama-server: --llama-server PATH or a build in {builds})")
        for parallel in [int(p) for p in args.parallel.split(",")] if name == "llama-server" else [1]:
            for context in (int(c) for c in args.contexts.split(",")):
                points.append(measure(engines[name], parallel, context, args.fill, args.logs))
                print(f"measured {name} x{parallel} at {context}", file=sys.stderr, flush=True)
    print("MiB of resident memory (RSS). At load: before any request. Peak: after prompts filling the context.")
    print("calibrated: with the runtime correction learned at load from the other contexts, as the service does")
    worst = _report(points)
    print(f"worst |error| uncalibrated {worst:.1%} (target 5 %)")


if __name__ == "__main__":
    main()
