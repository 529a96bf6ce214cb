"""Benchmark: conversations taking turns on one model, with the gateway's slot routing on and off.

Run by hand from the repository root (pytest does not collect tests/bench):

    PYTHONPATH=. .venv/bin/python tests/bench/conversations.py --rounds 2

Two real services (`python -m app serve`, each with its own MODELDECK_HOME), one with `--slot-routing on`, one with
`--slot-routing off`, each serving the bundled model on llama-server with `--parallel` slots (the test build from
$MODELDECK_TEST_ENGINES). Each round runs the whole scenario on one service, then on the other, the order swapped
every round (A B, B A, ...), so a noisy machine weighs on both alike; only one engine works at a time.

The scenario: `--conversations` conversations of `--turns` turns, interleaved (turn 1 of each, then turn 2 of each,
...), each with a system prompt of `--words` words, different for every conversation and round (so turn 1 is never
served from a cache), short user turns, `--max-tokens` streamed with temperature 0 through the official `openai`
client. TTFT is the time to the first content chunk. Also read back: the share of each turn's prompt tokens the
engine took from its cache, as the service recorded it (/api/requests), and llama-server's own timing of the prompt
it computed (`timings` in the stream's last event: the tokens not served from the cache, and their milliseconds), so
that a turn's TTFT splits into the engine's prefill and everything else (HTTP, the gateway, the client).

Printed: per round and service the TTFT of each turn (median over conversations), then per service the medians over
rounds, the ratio of turns 2..N to turn 1, the cached share per turn, the engine's prefill per turn (tokens and ms),
and the ratio routing on / off for turns 2..N.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import openai
from openai.types.chat import ChatCompletionMessageParam

from app.hub.library import BUNDLED_ID
from app.installs.available import LLAMA_SERVER_ENV
from app.paths import app_paths
from engines.llama_server import installed_builds
from tests.support.service import RunningService, start_service_process, stop_service_process, test_engines_dir

_TEXT = (
    "the river carried small stones past the old mill while farmers counted their harvest and children ran along "
    "a narrow path toward the market where traders sold copper pots bright cloth salted fish fresh bread and honey "
    "from hives kept behind the chapel near a quiet orchard that bloomed each spring under a pale sky full of birds "
    "returning from the south to nest in tall cedar trees above the harbor where ships waited for wind and news "
    "about storms rising over distant mountains covered in snow glaciers forests of pine and a valley of wild "
    "flowers that travelers described in letters sent home across the sea to families who kept every page"
)
VOCABULARY = _TEXT.split()


def system_prompt(words: int, seed: int) -> str:
    rng = random.Random(seed)
    body = " ".join(rng.choice(VOCABULARY) for _ in range(words))
    return f"Notebook {seed}. You are a patient assistant. Remember these notes: {body}."


@dataclass(frozen=True)
class Prefill:
    """The prompt tokens the engine computed for a request (those its cache did not hold) and how long it took."""

    tokens: float
    ms: float


def prefill_of(timings: object) -> Prefill | None:
    """llama-server's `timings` (prompt_n, prompt_ms), from the extra fields of a chunk; None if it sent none."""
    if not isinstance(timings, dict) or "prompt_n" not in timings or "prompt_ms" not in timings:
        return None
    return Prefill(float(timings["prompt_n"]), float(timings["prompt_ms"]))


def median_prefill(values: list[Prefill | None]) -> Prefill:
    known = [v for v in values if v is not None]
    if not known:
        return Prefill(float("nan"), float("nan"))
    return Prefill(statistics.median(v.tokens for v in known), statistics.median(v.ms for v in known))


@dataclass
class Target:
    name: str
    service: RunningService
    client: openai.OpenAI
    ttfts: list[list[float]] = field(default_factory=list)  # per round: per turn, the median over conversations
    cached: list[list[float]] = field(default_factory=list)  # per round: per turn, cached / prompt tokens
    prefill: list[list[Prefill]] = field(default_factory=list)  # per round: per turn, medians over conversations


def start(routing: str, parallel: int, workdir: Path) -> RunningService:
    home = workdir / f"home-{routing}"
    os.environ["MODELDECK_HOME"] = str(home)  # the service process and app_paths() both read it
    service = start_service_process(app_paths(), workdir, "--slot-routing", routing)
    started = service.client.start_model(
        BUNDLED_ID, wait=True, overrides={"engine": "llama-server", "parallel": parallel}
    )
    if started["state"] != "ready":
        stop_service_process(service)
        raise SystemExit(f"llama-server did not start: {started.get('message')}")
    return service


def ask(client: openai.OpenAI, messages: list[dict[str, str]], max_tokens: int) -> tuple[float, str, Prefill | None]:
    started = time.perf_counter()
    first: float | None = None
    parts: list[str] = []
    prefill: Prefill | None = None
    sent = cast(list[ChatCompletionMessageParam], messages)
    stream = client.chat.completions.create(
        model=BUNDLED_ID, messages=sent, max_tokens=max_tokens, temperature=0, stream=True
    )
    for chunk in stream:
        prefill = prefill_of((chunk.model_extra or {}).get("timings")) or prefill
        if chunk.choices and chunk.choices[0].delta.content:
            if first is None:
                first = time.perf_counter() - started
            parts.append(chunk.choices[0].delta.content)
    if first is None:
        raise SystemExit("a turn produced no content")
    return first, "".join(parts), prefill


def run_scenario(target: Target, args: argparse.Namespace, seed_base: int) -> None:
    conversations = [
        [{"role": "system", "content": system_prompt(args.words, seed_base + n)}] for n in range(args.conversations)
    ]
    ttft: list[list[float]] = [[] for _ in range(args.turns)]
    prefill: list[list[Prefill | None]] = [[] for _ in range(args.turns)]
    for turn in range(args.turns):
        for n, messages in enumerate(conversations):
            messages.append({"role": "user", "content": f"Question {turn + 1} from notebook {seed_base + n}: "
                                                        f"what does note {turn * 7 + n} say?"})  # fmt: skip
            seconds, answer, computed = ask(target.client, messages, args.max_tokens)
            messages.append({"role": "assistant", "content": answer})
            ttft[turn].append(seconds)
            prefill[turn].append(computed)
    target.ttfts.append([statistics.median(values) for values in ttft])
    target.prefill.append([median_prefill(values) for values in prefill])
    records = target.service.client.requests(limit=args.conversations * args.turns)
    shares: list[list[float]] = [[] for _ in range(args.turns)]
    for index, record in enumerate(records):  # sent one at a time: turn-major order
        if record["prompt_tokens"] and record["prompt_cached_tokens"] is not None:
            shares[index // args.conversations].append(record["prompt_cached_tokens"] / record["prompt_tokens"])
    target.cached.append([statistics.mean(s) if s else float("nan") for s in shares])


def later_over_first(ttfts: list[float]) -> float:
    return statistics.median(ttfts[1:]) / ttfts[0]


def report(targets: list[Target], turns: int) -> None:
    print()
    header = " ".join(f"turn {t + 1:>2} ms" for t in range(turns))
    print(f"{'routing':8} {'round':>5}  {header}  later/first")
    for target in targets:
        for number, ttfts in enumerate(target.ttfts, 1):
            cells = " ".join(f"{v * 1000:10.0f}" for v in ttfts)
            print(f"{target.name:8} {number:>5}  {cells}  {later_over_first(ttfts):10.3f}")
    print()
    medians: dict[str, list[float]] = {}
    for target in targets:
        per_turn = [statistics.median(r[t] for r in target.ttfts) for t in range(turns)]
        medians[target.name] = per_turn
        cached = [statistics.mean(r[t] for r in target.cached) for t in range(turns)]
        print(f"{target.name:8} median TTFT per turn (ms): " + ", ".join(f"{v * 1000:.0f}" for v in per_turn))
        print(f"{target.name:8} turns 2-{turns} / turn 1 (median of turn medians): {later_over_first(per_turn):.3f}")
        print(f"{target.name:8} prompt tokens from cache per turn: " + ", ".join(f"{c:.0%}" for c in cached))
        prefill = [median_prefill([r[t] for r in target.prefill]) for t in range(turns)]
        print(f"{target.name:8} engine prefill per turn (new tokens, ms): "
              + ", ".join(f"{p.tokens:.0f} in {p.ms:.0f}" for p in prefill))  # fmt: skip
        rest = [ttft * 1000 - p.ms for ttft, p in zip(per_turn, prefill, strict=True)]
        print(f"{target.name:8} TTFT beyond the engine's prefill per turn (ms): " + ", ".join(f"{r:.0f}" for r in rest))
    if "on" in medians and "off" in medians:
        on, off = statistics.median(medians["on"][1:]), statistics.median(medians["off"][1:])
        print(f"turns 2-{turns} TTFT, routing on / off: {on / off:.3f} ({on * 1000:.0f} vs {off * 1000:.0f} ms)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2, help="rounds per service, alternated (2)")
    parser.add_argument("--conversations", type=int, default=3, help="conversations taking turns (3)")
    parser.add_argument("--turns", type=int, default=4, help="turns per conversation (4)")
    parser.add_argument("--parallel", type=int, default=4, help="llama-server slots (4)")
    parser.add_argument("--words", type=int, default=300, help="words in each system prompt (300)")
    parser.add_argument("--max-tokens", type=int, default=24, help="tokens per answer (24)")
    parser.add_argument("--routing", choices=("both", "on", "off"), default="both", help="services to run (both)")
    args = parser.parse_args()
    builds = installed_builds(test_engines_dir())
    if not builds:
        raise SystemExit(f"no llama-server build under {test_engines_dir()}: run installers/test.sh")
    os.environ[LLAMA_SERVER_ENV] = str(builds[0].executable)
    os.environ.setdefault("MODELDECK_API_KEY", "bench-key")
    names = ["on", "off"] if args.routing == "both" else [args.routing]
    print(f"load average at start: {os.getloadavg()}")
    with tempfile.TemporaryDirectory(prefix="modeldeck-conversations-") as workdir:
        targets: list[Target] = []
        try:
            for name in names:
                service = start(name, args.parallel, Path(workdir))
                targets.append(Target(name, service, service.openai_client()))
            for number in range(args.rounds):
                order = targets if number % 2 == 0 else targets[::-1]
                for target in order:
                    # The same content for both services in a round, new content every round.
                    run_scenario(target, args, seed_base=1000 * (number + 1))
                    print(f"round {number + 1} {target.name}: turn TTFTs (ms) "
                          + ", ".join(f"{v * 1000:.0f}" for v in target.ttfts[-1]), flush=True)  # fmt: skip
        finally:
            for target in targets:
                stop_service_process(target.service)
    print(f"load average at end: {os.getloadavg()}")
    report(targets, args.turns)


if __name__ == "__main__":
    main()
