"""Benchmark: what identical prompts hide. `modeldeck bench` with unique prompts against identical ones, on
llama-cpp-python and on llama-server, through a real service on the bundled model.

Run by hand from the repository root (pytest does not collect tests/bench):

    PYTHONPATH=. .venv/bin/python tests/bench/prompt_modes.py --rounds 2 --requests 4 --prompt-tokens 400

The service runs in a fresh MODELDECK_HOME; llama-server is the build installers/test.sh made
($MODELDECK_TEST_ENGINES). Each round starts each engine in turn (the order swaps every round) and runs the two
modes back to back on it, their order swapping too (unique, identical, then identical, unique), so a noisy machine
weighs on all alike. Each run is the real CLI, `modeldeck bench --concurrency 1 --json`, with its token count and
warm-up before the timed requests. Printed per engine and mode: the median over rounds of the cards' TTFT p50 and
prompt tokens/s (a request's prompt tokens over its TTFT, median of the level), then the unique/identical ratios,
and the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from app.hub.library import BUNDLED_ID
from app.installs.available import LLAMA_SERVER_ENV
from app.paths import HOME_ENV, app_paths
from engines.llama_server import installed_builds
from tests.support.service import REPO, start_service_process, stop_service_process, test_engines_dir

ENGINES = ("llama-cpp-python", "llama-server")
MODES = ("unique", "identical")


def bench_card(mode: str, args: argparse.Namespace) -> dict[str, Any]:
    command = [sys.executable, "-m", "app", "bench", BUNDLED_ID, "--concurrency", "1", "--requests",
               str(args.requests), "--prompt-tokens", str(args.prompt_tokens), "--output-tokens",
               str(args.output_tokens), "--prompt-mode", mode, "--seed", str(args.seed), "--json"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=900, check=False)
    if done.returncode != 0:
        raise SystemExit(f"modeldeck bench --prompt-mode {mode} failed ({done.returncode}): {done.stderr[-2000:]}")
    card: dict[str, Any] = json.loads(done.stdout)
    return card


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def cell(value: float | None, scale: float = 1.0) -> str:
    return "-" if value is None else f"{value * scale:.1f}"


def ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or b is None or b == 0 else f"{a / b:.1f}x"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--requests", type=int, default=4, help="timed requests per run (concurrency 1)")
    parser.add_argument("--prompt-tokens", type=int, default=400)
    parser.add_argument("--output-tokens", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    builds = installed_builds(test_engines_dir())
    if not builds:
        raise SystemExit(f"no llama-server build in {test_engines_dir()}: run installers/test.sh")
    load_before = os.getloadavg()
    # ttft_p50_s and prompt_tokens_per_s of each round, per (engine, mode).
    figures: dict[tuple[str, str], dict[str, list[float]]] = {
        (engine, mode): {"ttft": [], "prompt": []} for engine in ENGINES for mode in MODES
    }
    launches: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="modeldeck-prompt-modes-") as home:
        os.environ[HOME_ENV] = home
        os.environ[LLAMA_SERVER_ENV] = str(builds[0].executable)
        service = start_service_process(app_paths(), Path(home))
        try:
            for round_index in range(args.rounds):
                engines = ENGINES if round_index % 2 == 0 else ENGINES[::-1]
                for engine in engines:
                    if any(m["id"] == BUNDLED_ID and m["state"] != "stopped" for m in service.client.models()):
                        service.client.stop_model(BUNDLED_ID)
                    started = service.client.start_model(BUNDLED_ID, wait=True, overrides={"engine": engine})
                    if started["state"] != "ready":
                        raise SystemExit(f"{engine} did not start: {started.get('message')}")
                    for mode in MODES if round_index % 2 == 0 else MODES[::-1]:
                        card = bench_card(mode, args)
                        level = card["results"][0]
                        if level["errors"]:
                            raise SystemExit(f"{engine} {mode}: {level['first_error']}")
                        figures[(engine, mode)]["ttft"].append(level["ttft_p50_s"])
                        figures[(engine, mode)]["prompt"].append(level["prompt_tokens_per_s"])
                        launches[engine] = " ".join(card["engine"]["launch"]["argv"][1:])
                        print(f"round {round_index + 1} {engine:>16} {mode:>9}: TTFT p50 "
                              f"{level['ttft_p50_s'] * 1000:8.1f} ms, prompt {level['prompt_tokens_per_s']:8.1f} "
                              f"tok/s, {level['prompt_tokens_mean']:.0f} prompt tokens", flush=True)  # fmt: skip
        finally:
            stop_service_process(service)
    load_after = os.getloadavg()

    print(f"\n{args.rounds} rounds, {args.requests} requests of {args.prompt_tokens} prompt tokens and "
          f"{args.output_tokens} output tokens per run, concurrency 1, seed {args.seed}")  # fmt: skip
    print(f"load average before {load_before[0]:.1f} / {load_before[1]:.1f}, after {load_after[0]:.1f} / "
          f"{load_after[1]:.1f} (1 / 5 min) on {os.cpu_count()} CPUs\n")  # fmt: skip
    print("| engine | TTFT p50 ms unique | identical | ratio | prompt tok/s unique | identical | ratio |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for engine in ENGINES:
        unique, identical = figures[(engine, "unique")], figures[(engine, "identical")]
        t_u, t_i = median(unique["ttft"]), median(identical["ttft"])
        p_u, p_i = median(unique["prompt"]), median(identical["prompt"])
        print(f"| {engine} | {cell(t_u, 1000)} | {cell(t_i, 1000)} | {ratio(t_u, t_i)} | {cell(p_u)} | "
              f"{cell(p_i)} | {ratio(p_i, p_u)} |")  # fmt: skip
    print("\nTTFT ratio: unique over identical; prompt tok/s ratio: identical over unique (what the cache hides).")
    for engine, launch in launches.items():
        print(f"{engine} launch: {launch}")


if __name__ == "__main__":
    main()
