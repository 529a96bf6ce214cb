"""Benchmark: the memory model's prediction against the resident memory the llama.cpp engine really uses.

Run by hand from the repository root (pytest does not collect tests/bench):

    .venv/bin/python tests/bench/memory_accuracy.py [--contexts 512,2048,8192] [--fill 0.9]

For each context the engine is started with the command ModelDeck would run (the llama-cpp-python adapter and the
default plan, at that context), on the bundled model. Resident memory (RSS of the engine process) is read once it
is ready, and again after a completion whose prompt fills `--fill` of the context: the worst case the planner must
cover, since that is when the attention buffers are touched. The prediction is `llama_cpp_memory` with the
model's built-in runtime figure ("uncalibrated"), and with the calibration correction learned leave-one-out from
the other contexts of the same run ("calibrated": what a user's second launch would be told). Target: |error| <= 5 %
at every context, after the request.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from app.hub.library import BUNDLED_ID, bundled_model
from app.planner.defaults import default_plan
from app.planner.facts import facts_from_gguf
from app.planner.memory import llama_cpp_memory
from engines.gguf import read_gguf_info
from engines.llama_cpp import LlamaCppPythonEngine
from engines.processes import free_loopback_port

MIB = 2**20
KEY = "bench-key"


@dataclass(frozen=True)
class Point:
    context: int
    predicted: int
    predicted_at_load: int
    ready: int
    after: int
    prompt_tokens: int


def _post(url: str, body: dict[str, object], timeout: float) -> dict[str, object]:
    request = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"}
    )
    with urllib.request.urlopen(request, timeout=timeout) as answer:
        result: dict[str, object] = json.loads(answer.read())
        return result


def _wait_ready(base: str, process: subprocess.Popen[bytes], deadline: float) -> None:
    request = urllib.request.Request(f"{base}/v1/models", headers={"Authorization": f"Bearer {KEY}"})
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"engine exited with {process.returncode}")
        try:
            with urllib.request.urlopen(request, timeout=2):
                return
        except (urllib.error.URLError, OSError):
            time.sleep(0.2)
    raise SystemExit("engine not ready in time")


def measure(context: int, fill: float, log_dir: Path) -> Point:
    spec = bundled_model()
    assert spec is not None and spec.path is not None, "the bundled model is not installed"
    info = read_gguf_info(spec.path)
    plan = default_plan(BUNDLED_ID, info)
    plan = dataclasses.replace(plan, context_length=context)
    estimate = llama_cpp_memory(facts_from_gguf(info), context, batch=plan.batch_size)
    port = free_loopback_port()
    command = LlamaCppPythonEngine().build_command(plan, port, KEY)
    log = (log_dir / f"engine-{context}.log").open("wb")
    process = subprocess.Popen(command.argv, env={**os.environ, **command.env}, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(base, process, time.monotonic() + 120)
        engine = psutil.Process(process.pid)
        ready = engine.memory_info().rss
        # "hello" is one token in SmolLM2's vocabulary; count to be sure the prompt leaves room for the answer
        words = int(context * fill)
        counted = _post(f"{base}/extras/tokenize/count", {"input": "hello " * words}, 60)["count"]
        assert isinstance(counted, int)
        words = words * int(context * fill) // max(counted, 1)
        _post(f"{base}/v1/completions", {"prompt": "hello " * words, "max_tokens": 8, "model": BUNDLED_ID}, 1800)
        after = engine.memory_info().rss
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()
    return Point(context, estimate.ram, estimate.ram_at_load, ready, after, words)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--contexts", default="512,2048,8192")
    parser.add_argument("--fill", type=float, default=0.9, help="share of the context the prompt fills (0.9)")
    parser.add_argument("--logs", type=Path, default=Path("/tmp/modeldeck-memory-bench"))
    args = parser.parse_args()
    args.logs.mkdir(parents=True, exist_ok=True)
    points = [measure(int(c), args.fill, args.logs) for c in args.contexts.split(",")]
    print("MiB of resident memory (RSS). At load: before any request. Peak: after a prompt filling the context.")
    print(
        f"{'context':>7} {'prompt':>6} | {'at load':>7} {'measured':>8} {'error':>7} | {'peak':>7} {'measured':>8} "
        f"{'error':>7} {'calibrated':>10}"
    )
    print("calibrated: with the runtime correction learned at load from the other contexts, as the service does")
    worst = 0.0
    for point in points:
        # calibration learns the runtime at load, from the other contexts of this run (leave one out)
        others = [p.ready - p.predicted_at_load for p in points if p is not point]
        correction = statistics.median(others) if others else 0
        load_error = (point.predicted_at_load - point.ready) / point.ready
        error = (point.predicted - point.after) / point.after
        calibrated = (point.predicted + correction - point.after) / point.after
        worst = max(worst, abs(error))
        print(
            f"{point.context:>7} {point.prompt_tokens:>6} | {point.predicted_at_load / MIB:>7.1f} "
            f"{point.ready / MIB:>8.1f} {load_error:>+7.1%} | {point.predicted / MIB:>7.1f} {point.after / MIB:>8.1f} "
            f"{error:>+7.1%} {calibrated:>+10.1%}"
        )
    print(f"worst |peak error| uncalibrated {worst:.1%} (target 5 %)")


if __name__ == "__main__":
    main()
