"""Benchmark: llama.cpp engine settings (OpenMP wait policy, ggml polling, threads, batch and ubatch) on an idle
machine and on one whose cores are busy, to choose the defaults ModelDeck launches llama-server and
llama-cpp-python with.

Run by hand from the repository root (pytest does not collect tests/bench):

    PYTHONPATH=. .venv/bin/python tests/bench/engine_defaults.py --conditions idle,busy --rounds 3

Each candidate is one engine started from its ModelDeck adapter's command on the bundled SmolLM2, with the
candidate's environment and flags laid over it. In every round each condition (idle: nothing added; busy:
`--busy-workers` processes spinning at normal priority, one per core by default) runs every candidate once, one
engine at a time, the order rotated from round to round so that a noisy machine weighs on all alike. Per
candidate and round: an untimed warm-up, then
- TTFT: a prompt of about `--prompt-words` words, new to the engine (a nonce opens it, so no prompt cache helps),
  to its first content chunk;
- decode tokens/s at one stream: content chunks after the first over the time from the first to the last;
- with `--streams N` (N > 1): content chunks of N concurrent streams over the wall time of all of them.
Printed: each measurement as it comes, the load average before and after, then per condition and candidate the
median of the rounds and its ratio to the first candidate. `--candidates` picks some of CANDIDATES by name.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

import openai

from app.hub.library import bundled_model
from app.installs.available import LLAMA_SERVER_ENV
from app.paths import app_paths
from app.planner.defaults import default_plan
from engines.base import Engine, EngineCommand, LaunchPlan
from engines.gguf import read_gguf_info
from engines.llama_cpp import LlamaCppPythonEngine
from engines.llama_server import LlamaServerEngine, installed_builds
from engines.processes import free_loopback_port
from tests.support.service import RunningService, start_service_process, stop_service_process, test_engines_dir

KEY = "bench-key"
WORDS = ("river", "stone", "garden", "lamp", "orbit", "velvet", "copper", "meadow", "signal", "harbor", "lantern")


@dataclass(frozen=True)
class Candidate:
    """One way to launch an engine: environment laid over the adapter's (None removes a variable), flags appended
    to its command (the engines take the last value of a flag given twice), and plan values replaced."""

    name: str
    engine: str  # llama-server or llama-cpp-python
    env: Mapping[str, str | None] = field(default_factory=dict)
    flags: tuple[str, ...] = ()
    threads: int | None = None  # None: the plan's default
    batch: int | None = None
    parallel: int = 1


_UNSET = {"OMP_WAIT_POLICY": None, "GOMP_SPINCOUNT": None}
CANDIDATES = {
    c.name: c
    for c in (
        Candidate("ls-default", "llama-server"),  # whatever the adapter launches today
        Candidate("ls-omp-unset", "llama-server", env=_UNSET),
        Candidate("ls-passive", "llama-server", env={**_UNSET, "OMP_WAIT_POLICY": "passive"}),
        Candidate("ls-active", "llama-server", env={**_UNSET, "OMP_WAIT_POLICY": "active"}),
        *(
            Candidate(f"ls-spin{n}", "llama-server", env={**_UNSET, "GOMP_SPINCOUNT": str(n * 1000)})
            for n in (1, 10, 30, 100)
        ),
        Candidate("ls-poll0", "llama-server", env=_UNSET, flags=("--poll", "0")),
        Candidate("ls-threads1", "llama-server", env=_UNSET, threads=1),
        Candidate("ls-passive-threads1", "llama-server", env={**_UNSET, "OMP_WAIT_POLICY": "passive"}, threads=1),
        Candidate("ls-b2048", "llama-server", batch=2048),
        Candidate("ls-ub256", "llama-server", flags=("-ub", "256")),
        Candidate("ls-ub128", "llama-server", flags=("-ub", "128")),
        Candidate("ls-slots4", "llama-server", parallel=4),  # ModelDeck's default slots, for --streams 4
        Candidate("lcp-default", "llama-cpp-python"),
        Candidate("lcp-omp-unset", "llama-cpp-python", env=_UNSET),
        Candidate("lcp-passive", "llama-cpp-python", env={**_UNSET, "OMP_WAIT_POLICY": "passive"}),
        *(
            Candidate(f"lcp-spin{n}", "llama-cpp-python", env={**_UNSET, "GOMP_SPINCOUNT": str(n * 1000)})
            for n in (1, 10, 30, 100)
        ),
        Candidate("lcp-threads1", "llama-cpp-python", env=_UNSET, threads=1),
        Candidate("lcp-b2048", "llama-cpp-python", batch=2048),
        Candidate("lcp-ub256", "llama-cpp-python", flags=("--n_ubatch", "256")),
    )
}
WAIT_POLICY_SET = "ls-omp-unset,ls-passive,ls-spin1,ls-spin10,ls-poll0,ls-threads1,lcp-omp-unset,lcp-passive,lcp-spin10"


@dataclass
class Figures:
    """One candidate's measurements in one round."""

    ttft_ms: float
    prompt_tokens: int
    decode: float
    streams: float | None = None


def engine_for(name: str) -> Engine:
    if name == "llama-cpp-python":
        return LlamaCppPythonEngine()
    builds = installed_builds(test_engines_dir())
    if not builds:
        raise SystemExit(f"no llama-server build in {test_engines_dir()}: run installers/test.sh")
    return LlamaServerEngine(configured=builds[0].executable)


def command_for(candidate: Candidate, plan: LaunchPlan, port: int) -> tuple[EngineCommand, dict[str, str]]:
    """The adapter's command for the candidate's plan, with its flags appended, and the environment to run it in."""
    plan = replace(
        plan,
        threads=candidate.threads or plan.threads,
        batch_size=candidate.batch or plan.batch_size,
        parallel=candidate.parallel,
        context_length=plan.context_length * candidate.parallel,  # one context per slot, as ModelDeck sizes them
        embeddings=False,
    )
    command = engine_for(candidate.engine).build_command(plan, port, KEY)
    env = {**os.environ, **command.env}
    for name, value in candidate.env.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return replace(command, argv=(*command.argv, *candidate.flags)), env


@contextmanager
def running(command: EngineCommand, env: dict[str, str]) -> Iterator[str]:
    """The engine started and ready; its /v1 URL. Stopped on leaving."""
    port = next(arg for prev, arg in zip(command.argv, command.argv[1:], strict=False) if prev == "--port")
    process = subprocess.Popen(command.argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            if process.poll() is not None:
                raise SystemExit(f"{command.argv[0]} exited with {process.returncode} while starting")
            try:
                request = urllib.request.Request(url + command.ready_path, headers=command.ready_headers)
                with urllib.request.urlopen(request, timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                if time.monotonic() > deadline:
                    raise SystemExit(f"{command.argv[0]} was not ready within 180 s") from None
                time.sleep(0.2)  # a readiness probe of a process that cannot signal it: polling is all there is
        yield url + "/v1"
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def new_prompt(words: int) -> str:
    """About `words` words no engine has seen: a nonce first, so that no prompt cache holds any prefix of it."""
    rng = random.Random()
    body = " ".join(rng.choice(WORDS) for _ in range(words))
    return f"{rng.getrandbits(64):x}. Summarise these words in one sentence: {body}"


@dataclass
class Stream:
    """What one streamed completion gave: content chunks and when the first and last came."""

    sent: float
    chunks: int = 0
    first: float | None = None
    last: float | None = None
    prompt_tokens: int = 0


def stream(client: openai.OpenAI, prompt: str, max_tokens: int, model: str = "m") -> Stream:
    result = Stream(time.perf_counter())
    response = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": prompt}], max_tokens=max_tokens, temperature=0.8,
        stream=True, stream_options={"include_usage": True},
    )  # fmt: skip
    for chunk in response:
        if chunk.usage is not None:
            result.prompt_tokens = chunk.usage.prompt_tokens
        if chunk.choices and chunk.choices[0].delta.content:
            now = time.perf_counter()
            result.first = result.first or now
            result.last = now
            result.chunks += 1
    return result


def measure(url: str, prompt_words: int, max_tokens: int, streams: int) -> Figures:
    client = openai.OpenAI(base_url=url, api_key=KEY, max_retries=0, timeout=600)
    try:
        stream(client, "Hi", 4)  # warm-up: first-use allocations and page faults
        prefill = stream(client, new_prompt(prompt_words), 1)
        decode = stream(client, f"{random.getrandbits(64):x}. Tell a long story about a robot.", max_tokens)
        if prefill.first is None or decode.first is None or decode.last is None or decode.chunks < 2:
            raise SystemExit("the engine streamed no content")
        figures = Figures(
            ttft_ms=(prefill.first - prefill.sent) * 1000,
            prompt_tokens=prefill.prompt_tokens,
            decode=(decode.chunks - 1) / (decode.last - decode.first),
        )
        if streams > 1:
            figures.streams = concurrent_throughput(client, streams, max_tokens)
        return figures
    finally:
        client.close()


def concurrent_throughput(client: openai.OpenAI, streams: int, max_tokens: int, model: str = "m") -> float:
    """Content chunks of `streams` concurrent completions over the wall time from the first send to the last chunk."""
    results: list[Stream] = []
    prompts = [f"{random.getrandbits(64):x}. Tell a long story about robot {i}." for i in range(streams)]
    threads = [
        threading.Thread(target=lambda p=p: results.append(stream(client, p, max_tokens, model))) for p in prompts
    ]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(r.chunks for r in results) / (max(r.last or started for r in results) - started)


@contextmanager
def busy(workers: int) -> Iterator[None]:
    """`workers` processes spinning at normal priority: the other jobs of a busy machine."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(workers)]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def load() -> str:
    return "/".join(f"{value:.2f}" for value in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--candidates", default=WAIT_POLICY_SET, help=f"comma-separated, of: {', '.join(CANDIDATES)}")
    parser.add_argument("--conditions", default="idle,busy", help="idle, busy or both")
    parser.add_argument("--busy-workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--prompt-words", type=int, default=300)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--streams", type=int, default=1, help="also measure N concurrent streams (N > 1)")
    args = parser.parse_args()
    unknown = [name for name in args.candidates.split(",") if name not in CANDIDATES]
    if unknown:
        raise SystemExit(f"unknown candidates {unknown}; known: {', '.join(CANDIDATES)}")
    candidates = [CANDIDATES[name] for name in args.candidates.split(",")]
    conditions = args.conditions.split(",")
    spec = bundled_model()
    if spec is None or spec.path is None:
        raise SystemExit("needs the bundled model: run installers/test.sh")
    info = read_gguf_info(spec.path)
    print(f"load average before: {load()}; {os.cpu_count()} CPUs; plan threads {default_plan('m', info).threads}",
          flush=True)  # fmt: skip
    results: dict[tuple[str, str], list[Figures]] = {(c, k.name): [] for c in conditions for k in candidates}
    for round_index in range(args.rounds):
        for condition in conditions:
            order = candidates[round_index % len(candidates) :] + candidates[: round_index % len(candidates)]
            with busy(args.busy_workers if condition == "busy" else 0):
                for candidate in order:
                    # As the service does at every start: the wait policy from the CPU use sampled now.
                    base = replace(default_plan("m", info), context_length=4096)
                    command, env = command_for(candidate, base, free_loopback_port())
                    with running(command, env) as url:
                        figures = measure(url, args.prompt_words, args.max_tokens, args.streams)
                    results[condition, candidate.name].append(figures)
                    many = f", {figures.streams:6.1f} tokens/s over {args.streams}" if figures.streams else ""
                    print(f"round {round_index + 1} {condition:4} {candidate.name:22} TTFT {figures.ttft_ms:7.1f} ms "
                          f"({figures.prompt_tokens} tokens), decode {figures.decode:6.1f} tokens/s{many}  "
                          f"load {load()}, default plan {'spins' if base.spin_wait else 'passive'}",
                          flush=True)  # fmt: skip
    print(f"load average after: {load()}")
    report(results, conditions, candidates, args.streams)


def report(
    results: dict[tuple[str, str], list[Figures]], conditions: list[str], candidates: list[Candidate], streams: int
) -> None:
    for condition in conditions:
        print(f"\n{condition}: medians over rounds (ratio to {candidates[0].name})")
        first = None
        for candidate in candidates:
            rows = results[condition, candidate.name]
            decode = statistics.median(r.decode for r in rows)
            ttft = statistics.median(r.ttft_ms for r in rows)
            many = statistics.median(r.streams or 0 for r in rows) if streams > 1 else None
            first = first or (decode, ttft, many)
            line = f"  {candidate.name:22} decode {decode:6.1f} tokens/s ({decode / first[0]:4.2f}x)  "
            line += f"TTFT {ttft:7.1f} ms ({ttft / first[1]:4.2f}x)"
            if many is not None and first[2]:
                line += f"  {streams} streams {many:6.1f} tokens/s ({many / first[2]:4.2f}x)"
            print(line)


if __name__ == "__main__":
    main()


@contextmanager
def service_with_llama_server() -> Iterator[RunningService]:
    """`modeldeck serve` in a temporary MODELDECK_HOME, with llama-server from $MODELDECK_LLAMA_SERVER or the build of
    installers/test.sh; stopped on the way out."""
    if LLAMA_SERVER_ENV not in os.environ:
        builds = installed_builds(test_engines_dir())
        if not builds:
            raise SystemExit(f"no llama-server: set ${LLAMA_SERVER_ENV} or run installers/test.sh")
        os.environ[LLAMA_SERVER_ENV] = str(builds[0].executable)
    with tempfile.TemporaryDirectory() as home:
        os.environ["MODELDECK_HOME"] = home
        service = start_service_process(app_paths(), Path(home))
        try:
            yield service
        finally:
            stop_service_process(service)
