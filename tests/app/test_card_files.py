"""Saved benchmark and quality cards as files: one that cannot be read (no object, not UTF-8, fields of the wrong
type) is left out of the listings with a warning naming it, and reading it by id is a clear 400, never a crash of
the listing, the control API or `modeldeck recommend`. Real card files in a real data directory."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

import pytest

from app.bench.card import BenchCard
from app.hub.library import BUNDLED_ID
from app.paths import AppPaths
from app.quality.card import QualityCard, quality_dir
from app.quality.measure import VariantResult
from app.service.events import EventBus
from app.service.jobs.bench_runs import BadBenchRequest, BenchRuns
from app.service.jobs.quality_runs import BadQualityRequest, QualityRuns
from tests.app.test_bench_prompts import OLD_CARD
from tests.support.quality_tools import modeldeck

HARDWARE = Path(__file__).parent.parent / "fixtures" / "hardware" / "rtx4090_24gb.json"
BENCH_CARD: dict[str, Any] = {**OLD_CARD, "id": "20261101-120000-good", "schema_version": 2}
QUALITY_CARD = QualityCard(
    "20261101-120000-quality-good", "2026-11-01T12:00:00+00:00", "0.1.0", "m", "m.f16", {}, {}, {"tokens": 1},
    [VariantResult("m.f16", "F16", 1, True, 10.0, 0.1, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0, None)],
).to_dict()  # fmt: skip

# Each: what a card file holds (bytes, or JSON written out) and the words that say why it cannot be read.
BAD_BENCH: dict[str, tuple[Any, str]] = {
    "a-list": ([], "the card is list, not an object"),
    "latin-1": ("Modèle".encode("latin-1"), "not UTF-8 text"),
    "deep": (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    "results-text": ({**BENCH_CARD, "results": "fast"}, "'results' is str, not list[LevelResult]"),
    "level-a-list": ({**BENCH_CARD, "results": [[1]]}, "level 1 is list, not an object"),
    "rate-text": ({**BENCH_CARD, "results": [{**OLD_CARD["results"][0], "output_tokens_per_s": "256"}]},
                  "'output_tokens_per_s' is str, not float"),
    "model-a-list": ({**BENCH_CARD, "model": []}, "'model' is list, not dict[str, Any]"),
    "no-engine": ({k: v for k, v in BENCH_CARD.items() if k != "engine"}, "has no 'engine'"),
}  # fmt: skip
BAD_QUALITY: dict[str, tuple[Any, str]] = {
    "a-list": ([], "the card is list, not an object"),
    "latin-1": ("Modèle".encode("latin-1"), "not UTF-8 text"),
    "text-a-list": ({**QUALITY_CARD, "text": []}, "'text' is list, not dict[str, Any]"),
    "size-true": ({**QUALITY_CARD, "results": [{**QUALITY_CARD["results"][0], "size_bytes": True}]},
                  "'size_bytes' is bool, not int"),
}  # fmt: skip


def write_cards(directory: Path, good: dict[str, Any], bad: dict[str, tuple[Any, str]]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{good['id']}.json").write_text(json.dumps(good))
    for name, (content, _) in bad.items():
        data = content if isinstance(content, bytes) else json.dumps(content).encode()
        (directory / f"{name}.json").write_bytes(data)


def test_an_unreadable_bench_card_is_left_out_and_refused_by_id(
    paths: AppPaths, caplog: pytest.LogCaptureFixture
) -> None:
    write_cards(paths.bench_dir, BENCH_CARD, BAD_BENCH)
    runs = BenchRuns(EventBus(), paths.bench_dir)
    with caplog.at_level(logging.WARNING, "modeldeck.cards"):
        assert [card["id"] for card in runs.cards()] == [BENCH_CARD["id"]]
    for name, (_, why) in BAD_BENCH.items():
        assert any(f"{name}.json" in r.getMessage() and why in r.getMessage() for r in caplog.records), name
        with pytest.raises(BadBenchRequest) as refused:
            runs.card(name)
        assert refused.value.status == 400 and f"The card {name!r} cannot be read" in str(refused.value), name
        assert why in str(refused.value), name
    assert runs.compare(BENCH_CARD["id"], BENCH_CARD["id"])[0] == ("card", BENCH_CARD["id"], BENCH_CARD["id"])


def test_an_unreadable_quality_card_is_left_out_and_refused_by_id(
    paths: AppPaths, caplog: pytest.LogCaptureFixture
) -> None:
    write_cards(quality_dir(paths), QUALITY_CARD, BAD_QUALITY)
    runs = QualityRuns(EventBus(), quality_dir(paths))
    with caplog.at_level(logging.WARNING, "modeldeck.cards"):
        assert [card["id"] for card in runs.cards()] == [QUALITY_CARD["id"]]
    for name, (_, why) in BAD_QUALITY.items():
        assert any(f"{name}.json" in r.getMessage() and why in r.getMessage() for r in caplog.records), name
        with pytest.raises(BadQualityRequest) as refused:
            runs.card(name)
        assert f"The card {name!r} cannot be read" in str(refused.value) and why in str(refused.value), name


@pytest.mark.parametrize(
    ("content", "why"),
    [([], "the card is list, not an object"), (None, "the card is NoneType, not an object"),
     ("card", "the card is str, not an object"), ({"results": {}}, "'results' is dict, not list")],
)  # fmt: skip
def test_a_card_of_the_wrong_shape_is_a_value_error(content: Any, why: str) -> None:
    for card_class, good in ((QualityCard, QUALITY_CARD), (BenchCard, BENCH_CARD)):
        data = {**good, **content} if isinstance(content, dict) else content
        with pytest.raises(ValueError, match=re.escape(why)):
            card_class.from_dict(data)


def test_recommend_reads_past_an_unreadable_quality_card(paths: AppPaths) -> None:
    write_cards(quality_dir(paths), QUALITY_CARD, {"a-list": BAD_QUALITY["a-list"]})
    done = modeldeck("recommend", BUNDLED_ID, "--hardware", str(HARDWARE), "--json", timeout=120)
    assert done.returncode in (0, 1) and json.loads(done.stdout)["model"], done.stderr
    assert "a-list.json" in done.stderr and "Traceback" not in done.stderr
