"""Benchmark: speculative decoding on and off, side by side, through ModelDeck: the bundled model on llama-server
without a draft and with itself as its draft (the one model here with its vocabulary), and on llama-cpp-python
without and with prompt-lookup decoding. The same prompts at temperature 0 in each round, in an order swapped every
round. Printed: each round's tokens/s (llama-server's own decode rate, `predicted_per_second`; on llama-cpp-python,
which reports none, completion tokens over the request's time, its short prompt included, alike with and without
lookup), the draft acceptance llama-server reports, whether the answers were the same, then the medians and the
ratio of speed with speculation over without.

On a 2-core CPU with a 135M model drafting for itself the ratio is below 1: a draft as large as its target saves
nothing. The point is that the measurement exists and is right; a large target with a small draft is where it pays.

Run by hand from the repository root (pytest does not collect tests/bench):

    PYTHONPATH=. .venv/bin/python tests/bench/speculative.py --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import openai

from app.client import ControlClient
from app.hub.library import BUNDLED_ID
from tests.bench.engine_defaults import load, service_with_llama_server

PROMPTS = (
    "Count from 1 to 60, separated by commas.",
    "Repeat this sentence five times: the quick brown fox jumps over the lazy dog.",
    "Write the alphabet in capital letters, one letter per line.",
)
SETUPS: dict[str, dict[str, int | str]] = {
    "llama-server": {"engine": "llama-server", "parallel": 1},
    "llama-server + draft": {"engine": "llama-server", "parallel": 1, "draft": BUNDLED_ID},
    "llama-cpp-python": {"engine": "llama-cpp-python"},
    "llama-cpp-python + lookup": {"engine": "llama-cpp-python", "lookup": 8},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=160)
    args = parser.parse_args()
    with service_with_llama_server() as service:
        speeds, acceptance, answers = run(service.url, service.api_key, service.client, args)
    print(f"load average after: {load()}")
    medians = {name: statistics.median(values) for name, values in speeds.items()}
    for name, value in medians.items():
        print(f"median {name:26} {value:6.1f} tokens/s")
    for base, fast in (("llama-server", "llama-server + draft"), ("llama-cpp-python", "llama-cpp-python + lookup")):
        same = answers[base] == answers[fast]
        print(f"{fast} / {base}: {medians[fast] / medians[base]:.2f} speed; same answers: {same}")
    if acceptance:
        print(f"draft acceptance (llama-server): {statistics.median(acceptance):.0%} of drafted tokens, median")


def run(
    url: str, key: str, control: ControlClient, args: argparse.Namespace
) -> tuple[dict[str, list[float]], list[float], dict[str, list[str]]]:
    speeds: dict[str, list[float]] = {name: [] for name in SETUPS}
    answers: dict[str, list[str]] = {}
    acceptance: list[float] = []
    print(f"load average before: {load()}", flush=True)
    for round_index in range(args.rounds):
        order = list(SETUPS) if round_index % 2 == 0 else list(SETUPS)[::-1]
        for name in order:
            control.stop_model(BUNDLED_ID)
            started = control.start_model(BUNDLED_ID, wait=True, overrides=SETUPS[name])
            if started["state"] != "ready":
                raise SystemExit(f"{name} did not start: {started['message']}")
            client = openai.OpenAI(base_url=url, api_key=key, max_retries=0, timeout=600)
            try:
                texts, rates = [], []
                for prompt in PROMPTS:
                    text, rate, timings = _answer(client, prompt, args.max_tokens)
                    texts.append(text)
                    rates.append(rate)
                    if timings.get("draft_n"):
                        acceptance.append(timings["draft_n_accepted"] / timings["draft_n"])
            finally:
                client.close()
            speeds[name].append(statistics.mean(rates))
            answers.setdefault(name, texts)
            print(f"round {round_index + 1} {name:26} {speeds[name][-1]:6.1f} tokens/s  load {load()}", flush=True)
    return speeds, acceptance, answers


def _answer(client: openai.OpenAI, prompt: str, max_tokens: int) -> tuple[str, float, dict[str, Any]]:
    """The answer, its decode tokens/s, and llama-server's timings (empty from llama-cpp-python)."""
    started = time.perf_counter()
    reply = client.chat.completions.create(
        model=BUNDLED_ID, messages=[{"role": "user", "content": prompt}], max_tokens=max_tokens, temperature=0,
        extra_body={"repeat_penalty": 1.0},  # llama-cpp-python's lookup applies a penalty to drafted tokens too
    )  # fmt: skip
    elapsed = time.perf_counter() - started
    timings: dict[str, Any] = (reply.model_extra or {}).get("timings") or {}
    tokens = reply.usage.completion_tokens if reply.usage else 0
    rate = float(timings.get("predicted_per_second") or (tokens / elapsed if elapsed > 0 else 0.0))
    return reply.choices[0].message.content or "", rate, timings


if __name__ == "__main__":
    main()
