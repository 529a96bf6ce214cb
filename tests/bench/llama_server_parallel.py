"""Benchmark: aggregate decode throughput of N concurrent streams on llama-cpp-python's server (one request at a
time) against llama-server with `--parallel N`, both started from their ModelDeck adapters' commands.

Run by hand from the repository root (pytest does not collect tests/bench):

    PYTHONPATH=. .venv/bin/python tests/bench/llama_server_parallel.py --streams 4 --rounds 3

Same GGUF file (the bundled SmolLM2), same threads and context, engines run one at a time and alternated over
`--rounds` (A B A B ...) so a noisy machine weighs on both alike. Each round: an untimed warm-up request, then N
streamed chat completions sent at once (`--max-tokens` each, temperature 0.8); the figure is all content chunks
received / wall time from the first send to the last chunk. Printed: per-round figures and the ratio of medians.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import threading
import time
import urllib.request
from dataclasses import replace

import openai

from app.hub.library import bundled_model
from engines.base import Engine, LaunchPlan
from engines.llama_cpp import LlamaCppPythonEngine
from engines.llama_server import LlamaServerEngine, installed_builds
from engines.processes import free_loopback_port
from tests.support.service import test_engines_dir

KEY = "bench-key"


def serve(engine: Engine, plan: LaunchPlan) -> tuple[subprocess.Popen[bytes], str]:
    port = free_loopback_port()
    command = engine.build_command(plan, port, KEY)
    process = subprocess.Popen(command.argv, env={**os.environ, **command.env}, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            request = urllib.request.Request(url + command.ready_path, headers=command.ready_headers)
            with urllib.request.urlopen(request, timeout=2) as answer:
                if answer.status == 200:
                    return process, url + "/v1"
        except OSError:
            time.sleep(0.2)
    process.kill()
    raise SystemExit(f"{engine.name} did not become ready")


def round_throughput(base_url: str, streams: int, max_tokens: int) -> float:
    client = openai.OpenAI(base_url=base_url, api_key=KEY, max_retries=0, timeout=600)
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}], max_tokens=4)
    counts = [0] * streams

    def one(index: int) -> None:
        stream = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": f"Tell a long story about robot {index}."}],
            max_tokens=max_tokens, temperature=0.8, stream=True,
        )  # fmt: skip
        counts[index] = sum(1 for c in stream if c.choices and c.choices[0].delta.content)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(streams)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - started
    client.close()
    return sum(counts) / elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--streams", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    spec = bundled_model()
    builds = installed_builds(test_engines_dir())
    if spec is None or spec.path is None or not builds:
        raise SystemExit("needs the bundled model and a llama-server build: run installers/test.sh")
    plan = LaunchPlan("m", spec.path, context_length=2048 * args.streams, threads=args.threads, embeddings=False)
    variants: list[tuple[str, Engine, LaunchPlan]] = [
        ("llama-cpp-python", LlamaCppPythonEngine(), plan),
        (f"llama-server --parallel {args.streams}", LlamaServerEngine(configured=builds[0].executable),
         replace(plan, parallel=args.streams)),
    ]  # fmt: skip
    results: dict[str, list[float]] = {name: [] for name, _, _ in variants}
    for round_index in range(args.rounds):
        for name, engine, engine_plan in variants:
            process, url = serve(engine, engine_plan)
            try:
                value = round_throughput(url, args.streams, args.max_tokens)
            finally:
                process.terminate()
                process.wait(timeout=30)
            results[name].append(value)
            print(f"round {round_index + 1}: {name:28} {value:7.1f} tokens/s over {args.streams} streams", flush=True)
    medians = {name: statistics.median(values) for name, values in results.items()}
    for name, median in medians.items():
        print(f"median {name:28} {median:7.1f} tokens/s")
    first, second = medians.values()
    print(f"ratio llama-server / llama-cpp-python: {second / first:.2f}")


if __name__ == "__main__":
    main()
