"""Benchmark prompt modes on the bundled model: prompts are counted by the model's own tokenizer, then sent through
the real service with `--log-request-text`, so the test reads back what the engine was asked and what it counted.

- unique prompts differ and have the length asked for (chat template included); a seed repeats a run's prompts;
- shared-prefix prompts share exactly the prefix, token for token;
- multi-turn conversations take turns, carry their history and report TTFT per turn;
- a card written before prompt modes stays readable and is labelled an identical-prompt run;
- too short a prompt for the mode is refused with the length that would do.
"""

from __future__ import annotations

import itertools
import json
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from llama_cpp import Llama

from app.bench.card import BenchCard, compare, load_card, to_markdown
from app.bench.prompts import FOLLOW_UP_WORDS, INSTRUCTION, WORDS, PromptSet
from app.hub.library import BUNDLED_ID
from app.paths import AppPaths
from tests.support.service import REPO, RunningService, start_service_process, stop_service_process
from tests.support.waiting import wait_for

PROMPT_TOKENS = 72
PROMPT_TOLERANCE = 2  # the gateway counts streamed prompts itself, maybe without the BOS token the engine adds
PREFIX_TOKENS = 40
SHARED_PROMPT_TOKENS = 96  # the bundled model's template and the instruction take 42 tokens, the prefix 40


def modeldeck(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=300, check=False)  # fmt: skip


def bench(*args: str) -> dict[str, Any]:
    done = modeldeck("bench", BUNDLED_ID, "--output-tokens", "3", "--json", *args)
    assert done.returncode == 0, done.stderr
    card: dict[str, Any] = json.loads(done.stdout)
    return card


@pytest.fixture(scope="module")
def tokenizer() -> Iterator[Llama]:
    """The bundled model's own tokenizer (vocabulary only, no weights)."""
    from app.hub.library import bundled_model

    spec = bundled_model()
    assert spec is not None and spec.path is not None
    llm = Llama(str(spec.path), vocab_only=True, verbose=False)
    yield llm
    llm.close()


def tokens(llm: Llama, text: str) -> list[int]:
    return list(llm.tokenize(text.encode(), add_bos=False, special=False))


def common_prefix(first: list[Any], second: list[Any]) -> int:
    return sum(1 for _ in itertools.takewhile(lambda pair: pair[0] == pair[1], zip(first, second, strict=False)))


def test_each_word_is_one_token_so_prompts_have_the_length_asked_for(tokenizer: Llama) -> None:
    for word in WORDS:
        assert len(tokens(tokenizer, word)) == 1 and len(tokens(tokenizer, f" {word}")) == 1, word
    instruction = len(tokens(tokenizer, INSTRUCTION))
    for mode in ("unique", "shared-prefix", "identical", "multi-turn"):
        prompts = PromptSet(mode, 3, 150, PREFIX_TOKENS)
        texts = [prompts.prompt("level0", index) for index in range(300)]
        assert {len(tokens(tokenizer, text)) for text in texts} == {150 + instruction}, mode
        distinct = len(set(texts))
        assert distinct == (1 if mode == "identical" else 300), mode
    # Beyond one level: the prompts of the next level and of the warm-up are new too.
    unique = PromptSet("unique", 3, 150)
    level0 = {unique.prompt("level0", index) for index in range(64)}
    assert not level0 & {unique.prompt("level1", index) for index in range(64)}
    assert unique.prompt("warmup", 0) not in level0


def test_a_seed_repeats_the_prompts_and_another_seed_changes_them() -> None:
    texts = [PromptSet("unique", 11, 60).prompt("level0", index) for index in range(20)]
    assert texts == [PromptSet("unique", 11, 60).prompt("level0", index) for index in range(20)]
    other = [PromptSet("unique", 12, 60).prompt("level0", index) for index in range(20)]
    assert not set(texts) & set(other)


def test_shared_prefix_prompts_share_exactly_the_prefix(tokenizer: Llama) -> None:
    prompts = PromptSet("shared-prefix", 5, 120, PREFIX_TOKENS)
    encoded = [tokens(tokenizer, prompts.prompt("level0", index)) for index in range(256)]
    assert {common_prefix(a, b) for a, b in itertools.combinations(encoded, 2)} == {PREFIX_TOKENS}
    assert common_prefix(encoded[0], tokens(tokenizer, prompts.prompt("warmup", 0))) == PREFIX_TOKENS


def test_prompts_too_short_for_the_mode_are_refused() -> None:
    with pytest.raises(ValueError, match="leaves 2 to each request"):
        PromptSet("shared-prefix", 0, 42, 40)
    with pytest.raises(ValueError, match="prompt mode must be one of"):
        PromptSet("random", 0, 42)  # type: ignore[arg-type]


def logged(paths: AppPaths, count: int) -> list[dict[str, Any]]:
    """The chat requests of the request log, oldest first, once there are `count` of them."""

    def read() -> list[dict[str, Any]] | None:
        if not paths.requests_db.is_file():
            return None
        with sqlite3.connect(paths.requests_db) as db:
            db.row_factory = sqlite3.Row
            rows = db.execute("SELECT * FROM requests WHERE route = '/v1/chat/completions' ORDER BY rowid").fetchall()
        return [dict(row) for row in rows] if len(rows) >= count else None

    rows: list[dict[str, Any]] = wait_for(read, 30, f"{count} requests in the request log")
    return rows


def user_text(row: dict[str, Any]) -> str:
    text: str = json.loads(row["prompt_text"])[-1]["content"]
    return text


@pytest.fixture
def text_service(paths: AppPaths, tmp_path: Path) -> Iterator[RunningService]:
    """The service on the bundled model, keeping prompts and completions in its request log."""
    running = start_service_process(paths, tmp_path, "--model", BUNDLED_ID, "--log-request-text")
    yield running
    stop_service_process(running)


def rows_after(paths: AppPaths, seen: int, count: int) -> list[dict[str, Any]]:
    """The `count` chat requests logged after the first `seen`."""
    return logged(paths, seen + count)[seen : seen + count]


def test_unique_prompts_differ_have_the_length_asked_for_and_repeat_with_a_seed(
    text_service: RunningService, paths: AppPaths
) -> None:
    # A token count (not streamed), the warm-up, then 3 measured requests, 2 at a time.
    card = bench("--concurrency", "2", "--requests", "3", "--prompt-tokens", str(PROMPT_TOKENS), "--seed", "7")
    rows = rows_after(paths, 0, 5)
    assert [row["stream"] for row in rows] == [0, 1, 1, 1, 1]
    measured = rows[2:]
    assert len({user_text(row) for row in rows[1:]}) == 4  # the warm-up's prompt is none of the measured ones
    for row in rows[1:]:
        assert abs(row["prompt_tokens"] - PROMPT_TOKENS) <= PROMPT_TOLERANCE, row
    params = card["parameters"]
    assert params["prompt_mode"] == "unique" and params["seed"] == 7 and params["prompt_tokens"] == PROMPT_TOKENS
    assert params["prompt_overhead_tokens"] + params["prompt_words"] == PROMPT_TOKENS
    level = card["results"][0]
    assert level["errors"] == 0 and abs(level["prompt_tokens_mean"] - PROMPT_TOKENS) <= PROMPT_TOLERANCE
    assert level["prompt_tokens_per_s"] > 0 and level["decode_tokens_per_s"] > 0
    assert level["ttft_by_turn_s"] is None and level["warm_cold_ratio"] is None
    # The launch as the service ran the engine, its key redacted.
    argv, env = card["engine"]["launch"]["argv"], card["engine"]["launch"]["env"]
    assert argv[argv.index("--model_alias") + 1] == BUNDLED_ID
    assert argv[argv.index("--n_ctx") + 1] == str(card["engine"]["plan"]["context"])
    assert env["API_KEY"] == "***"
    assert "Launch: `API_KEY=*** " in (paths.bench_dir / f"{card['id']}.md").read_text()

    # The same seed again: the same prompts.
    again = bench("--concurrency", "2", "--requests", "3", "--prompt-tokens", str(PROMPT_TOKENS), "--seed", "7")
    assert again["parameters"]["prompt_digest"] == params["prompt_digest"]
    rows = rows_after(paths, 5, 5)
    assert sorted(user_text(row) for row in rows[2:]) == sorted(user_text(row) for row in measured)


def test_shared_prefix_prompts_share_exactly_the_prefix_through_the_service(
    text_service: RunningService, paths: AppPaths, tokenizer: Llama
) -> None:
    shared = bench("--prompt-mode", "shared-prefix", "--prefix-tokens", str(PREFIX_TOKENS), "--concurrency", "2",
                   "--requests", "3", "--prompt-tokens", str(SHARED_PROMPT_TOKENS))  # fmt: skip
    assert shared["parameters"]["prefix_tokens"] == PREFIX_TOKENS and shared["results"][0]["errors"] == 0
    rows = rows_after(paths, 0, 5)
    # The warm-up and the measured requests start with the same 40 tokens, and only those.
    encoded = [tokens(tokenizer, user_text(row)) for row in rows[1:]]
    assert {common_prefix(a, b) for a, b in itertools.combinations(encoded, 2)} == {PREFIX_TOKENS}
    assert all(abs(row["prompt_tokens"] - SHARED_PROMPT_TOKENS) <= PROMPT_TOLERANCE for row in rows[1:])

    # Too few tokens for the template, the instruction, the prefix and words of each request's own: refused.
    short = modeldeck("bench", BUNDLED_ID, "--prompt-mode", "shared-prefix", "--prefix-tokens", "30",
                      "--prompt-tokens", "60", "--concurrency", "1")  # fmt: skip
    assert short.returncode == 2, short.stderr
    assert "60 prompt tokens are too few for this model: the chat template and the instruction take" in short.stderr
    overhead = shared["parameters"]["prompt_overhead_tokens"]
    assert f"ask for at least {overhead + 30 + 4}" in short.stderr
    assert len(list(paths.bench_dir.glob("*.json"))) == 1  # no card for it


def test_multi_turn_conversations_take_turns_and_carry_their_history(
    text_service: RunningService, paths: AppPaths
) -> None:
    talk = bench("--prompt-mode", "multi-turn", "--conversations", "2", "--turns", "3", "--concurrency", "1",
                 "--prompt-tokens", str(PROMPT_TOKENS))  # fmt: skip
    assert talk["parameters"]["conversations"] == [2] and talk["parameters"]["requests_per_level"] == [6]
    rows = rows_after(paths, 2, 6)  # after the token count and the warm-up
    chats = [json.loads(row["prompt_text"]) for row in rows]
    # One request at a time: A1, B1, A2, B2, A3, B3; each turn is the history, the answer and a new message.
    assert [len(chat) for chat in chats] == [1, 1, 3, 3, 5, 5]
    for earlier, later in ((0, 2), (1, 3), (2, 4), (3, 5)):
        assert later_carries(chats[later], chats[earlier], rows[earlier]["completion_text"]), (earlier, later)
    assert chats[0][0]["content"] != chats[1][0]["content"]
    assert chats[2][-1]["content"] != chats[3][-1]["content"]  # each follow-up is new too
    assert abs(rows[0]["prompt_tokens"] - PROMPT_TOKENS) <= PROMPT_TOLERANCE
    assert rows[2]["prompt_tokens"] > rows[0]["prompt_tokens"] + FOLLOW_UP_WORDS  # the answer and follow-up count
    level = talk["results"][0]
    assert level["errors"] == 0 and level["completed"] == 6
    by_turn = level["ttft_by_turn_s"]
    assert len(by_turn) == 3 and all(ttft > 0 for ttft in by_turn)
    assert level["warm_cold_ratio"] == pytest.approx((by_turn[1] + by_turn[2]) / 2 / by_turn[0])
    markdown = (paths.bench_dir / f"{talk['id']}.md").read_text()
    assert "warm/cold" in markdown and "| turn 3 TTFT ms |" in markdown


def later_carries(later: list[dict[str, str]], earlier: list[dict[str, str]], answer: str) -> bool:
    """`later` is `earlier`, then the answer to it, then one new user message."""
    return (
        later[: len(earlier)] == earlier
        and later[len(earlier)] == {"role": "assistant", "content": answer}
        and (len(later) == len(earlier) + 2 and later[-1]["role"] == "user")
    )


OLD_CARD: dict[str, Any] = {
    "id": "20261101-120000-smollm2-135m-instruct",
    "created": "2026-11-01T12:00:00Z",
    "modeldeck_version": "0.9.0",
    "model": {"id": BUNDLED_ID, "name": "SmolLM2", "path": "/m.gguf", "size_bytes": 1, "quantization": "Q4_1"},
    "engine": {"name": "llama-cpp-python", "version": "0.3.36", "plan": {"context": 8192}},
    "hardware": {"id": "0123456789abcdef", "cpu": "cpu", "logical_cores": 2, "physical_cores": 2, "ram_total": 2**33,
                 "gpus": [], "driver_version": None, "cuda_version": None, "os": "Linux"},
    "parameters": {"concurrency": [1], "prompt_tokens": 256, "output_tokens": 128, "requests_per_level": [8],
                   "endpoint": "/v1/chat/completions", "temperature": 0},
    "results": [{"concurrency": 1, "requests": 8, "completed": 8, "errors": 0, "duration_s": 4.0,
                 "output_tokens": 1024, "prompt_tokens_mean": 250.0, "output_tokens_per_s": 256.0,
                 "request_rate": 2.0, "ttft_p50_s": 0.023, "ttft_p99_s": 0.03, "itl_p50_s": 0.015,
                 "itl_p99_s": 0.02, "gain": 1.0, "first_error": None}],
    "schema_version": 1,
}  # fmt: skip


def test_a_card_written_before_prompt_modes_reads_as_an_identical_prompt_run(
    service: RunningService, paths: AppPaths
) -> None:
    paths.bench_dir.mkdir(parents=True)
    (paths.bench_dir / f"{OLD_CARD['id']}.json").write_text(json.dumps(OLD_CARD))
    card = load_card(OLD_CARD["id"], paths.bench_dir)
    assert card.prompt_mode == "identical" and card.results[0].prompt_tokens_per_s is None
    assert "- Prompts: identical (every request the same prompt: measures the prompt cache)" in to_markdown(card)
    assert "- Launch: `not recorded`" in to_markdown(card)
    parameters = {**OLD_CARD["parameters"], "prompt_mode": "unique", "seed": 0}
    newer = BenchCard.from_dict({**OLD_CARD, "id": "new", "schema_version": 2, "parameters": parameters})
    rows = {line.split("  ")[0]: line for line in compare(card, newer).splitlines()}
    assert "identical" in rows["prompts"] and "unique (each request its own prompt), seed 0" in rows["prompts"]

    # Through the control API, as the GUI reads it.
    listed = service.client.bench()["cards"]
    assert [(c["id"], c["prompt_mode"]) for c in listed] == [(OLD_CARD["id"], "identical")]
    assert service.client.bench_card(OLD_CARD["id"])["results"][0]["ttft_p50_s"] == 0.023
    # A card of an unknown schema is still refused with its reason.
    (paths.bench_dir / "future.json").write_text(json.dumps({**OLD_CARD, "id": "future", "schema_version": 99}))
    with pytest.raises(ValueError, match="schema 99 is not one of"):
        load_card("future", paths.bench_dir)


def test_bad_prompt_options_on_the_command_line_get_a_clear_error() -> None:
    """Refused before the service is even looked for: none runs here."""
    for args, words in (
        (["--prompt-mode", "shared-prefix"], "shared-prefix needs a prefix of 1 to 255 tokens"),
        (["--prompt-mode", "multi-turn", "--turns", "1"], "argument --turns: must be from 2 to 64, got 1"),
        (["--prompt-mode", "multi-turn", "--requests", "4"], "conversations x turns requests"),
        (["--prompt-mode", "random"], "invalid choice: 'random'"),
    ):
        done = modeldeck("bench", BUNDLED_ID, *args)
        assert done.returncode == 2 and words in done.stderr, (args, done.stderr)
