"""Benchmark: llama-server against llama-cpp-python through ModelDeck, each with ModelDeck's default plan for it, at
one stream (decode tokens/s of the stream) and at `--streams` concurrent streams (all content chunks over the wall
time). The goals: llama-server at one stream at least 95 % of llama-cpp-python; at 4 streams at least 3x.

Run by hand from the repository root (pytest does not collect tests/bench):

    PYTHONPATH=. .venv/bin/python tests/bench/engine_parity.py --rounds 3

One `modeldeck serve` in a temporary MODELDECK_HOME, llama-server from $MODELDECK_LLAMA_SERVER or the build of
installers/test.sh. Each round starts the bundled model on each engine in turn (the order swapped every round,
through the control API, no other launch parameter), measures through the /v1 endpoint with the official `openai`
client (an untimed warm-up first, prompts new to the engine) and stops it. Printed: each figure with the load
average, then the medians and the ratios. One stream's rate is timed from its first content chunk to its last as
the client reads them: on a busy machine a client that was not scheduled reads many at once and reports an absurd
rate for that round, which is why the medians are the figures.
"""

from __future__ import annotations

import argparse
import statistics

import openai

from app.client import ControlClient
from app.hub.library import BUNDLED_ID
from tests.bench.engine_defaults import concurrent_throughput, load, new_prompt, service_with_llama_server, stream

ENGINES = ("llama-cpp-python", "llama-server")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--streams", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=128)
    args = parser.parse_args()
    with service_with_llama_server() as service:
        results = run(service.url, service.api_key, service.client, args)
    print(f"load average after: {load()}")
    medians = {key: statistics.median(values) for key, values in results.items()}
    for (engine, what), value in medians.items():
        print(f"median {engine:17} {what:10} {value:6.1f} tokens/s")
    one = medians["llama-server", "1 stream"] / medians["llama-cpp-python", "1 stream"]
    many = medians["llama-server", f"{args.streams} streams"] / medians["llama-cpp-python", f"{args.streams} streams"]
    print(f"llama-server / llama-cpp-python: {one:.2f} at 1 stream, {many:.2f} at {args.streams} streams")


def run(url: str, key: str, control: ControlClient, args: argparse.Namespace) -> dict[tuple[str, str], list[float]]:
    results: dict[tuple[str, str], list[float]] = {}
    print(f"load average before: {load()}", flush=True)
    for round_index in range(args.rounds):
        for engine in ENGINES if round_index % 2 == 0 else ENGINES[::-1]:
            started = control.start_model(BUNDLED_ID, wait=True, overrides={"engine": engine})
            if started["state"] != "ready":
                raise SystemExit(f"{engine} did not start: {started['message']}")
            client = openai.OpenAI(base_url=url, api_key=key, max_retries=0, timeout=600)
            try:
                stream(client, "Hi", 4, model=BUNDLED_ID)  # warm-up
                single = stream(client, new_prompt(20) + " Then tell a long story.", args.max_tokens, model=BUNDLED_ID)
                assert single.first is not None and single.last is not None and single.chunks > 1
                decode = (single.chunks - 1) / (single.last - single.first)
                many = concurrent_throughput(client, args.streams, args.max_tokens, model=BUNDLED_ID)
            finally:
                client.close()
                control.stop_model(BUNDLED_ID)
            results.setdefault((engine, "1 stream"), []).append(decode)
            results.setdefault((engine, f"{args.streams} streams"), []).append(many)
            print(f"round {round_index + 1} {engine:17} plan {started['plan']}: 1 stream {decode:6.1f} tokens/s, "
                  f"{args.streams} streams {many:6.1f} tokens/s  load {load()}", flush=True)  # fmt: skip
    return results


if __name__ == "__main__":
    main()
