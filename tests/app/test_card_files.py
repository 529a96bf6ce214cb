"""Saved benchmark and quality cards as files: one that cannot be read (no object, not UTF-8, fields of the wrong
type, dicts without the keys readers use) is left out of the listings with a warning naming it, and reading or
comparing it by id is a clear 400 (a one-line error on the command line), never a crash of the listing, the control
API or `modeldeck recommend`. A card is saved whole or not at all: a write that fails (a file size limit set in a
child process) leaves no part of it, and the run says it could not save the card (`bench --json` and `quality` still
print what they measured). Real card files in a real data directory."""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from app.bench.card import BenchCard, to_markdown
from app.client import ControlError
from app.hardware.fingerprint import hardware_fingerprint
from app.hardware.profile import HardwareProfile
from app.hub.library import BUNDLED_ID
from app.paths import AppPaths
from app.quality.card import QualityCard, quality_dir, results_table
from app.quality.card import to_markdown as quality_markdown
from app.quality.measure import VariantResult
from app.service.events import EventBus
from app.service.jobs.bench_runs import BadBenchRequest, BenchRuns
from app.service.jobs.quality_runs import BadQualityRequest, QualityRuns
from tests.app.bench.test_bench_prompts import OLD_CARD
from tests.support.quality_tools import modeldeck
from tests.support.service import REPO, start_service_process, stop_service_process

HARDWARE = Path(__file__).parent.parent / "fixtures" / "hardware" / "rtx4090_24gb.json"
ENGINE = {**OLD_CARD["engine"], "launch": {"argv": ["llama-server", "-m", "m.gguf"], "env": {"OMP_NUM_THREADS": "2"}}}
BENCH_CARD: dict[str, Any] = {**OLD_CARD, "id": "20261101-120000-good", "schema_version": 2, "engine": ENGINE}
TEXT = {"description": "a text", "chars": 10, "sha256": "0" * 64, "tokens": 1, "chunks": 1, "n_ctx": 2}
QUALITY_CARD = QualityCard(
    "20261101-120000-quality-good", "2026-11-01T12:00:00+00:00", "0.1.0", "m", "m.f16", {}, {}, TEXT,
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
    "model-empty": ({**BENCH_CARD, "model": {}}, "the card: 'model' has no 'id'"),
    "engine-null": ({**BENCH_CARD, "engine": {"name": None}}, "the card: 'engine.name' is NoneType, not str"),
    "hardware-empty": ({**BENCH_CARD, "hardware": {}}, "the card: 'hardware' has no 'id'"),
    "tokens-text": ({**BENCH_CARD, "parameters": {**BENCH_CARD["parameters"], "prompt_tokens": "256"}},
                    "the card: 'parameters.prompt_tokens' is str, not int"),
    "argv-text": ({**BENCH_CARD, "engine": {**ENGINE, "launch": {"argv": "llama", "env": {}}}},
                  "the card: 'engine.launch.argv' is str, not list[str]"),
    "env-a-list": ({**BENCH_CARD, "engine": {**ENGINE, "launch": {"argv": [], "env": []}}},
                   "the card: 'engine.launch.env' is list, not dict[str, str]"),
    "launch-no-argv": ({**BENCH_CARD, "engine": {**ENGINE, "launch": {"env": {}}}},
                       "the card: 'engine.launch' has no 'argv'"),
}  # fmt: skip
BAD_QUALITY: dict[str, tuple[Any, str]] = {
    "a-list": ([], "the card is list, not an object"),
    "latin-1": ("Modèle".encode("latin-1"), "not UTF-8 text"),
    "text-a-list": ({**QUALITY_CARD, "text": []}, "'text' is list, not dict[str, Any]"),
    "text-empty": ({**QUALITY_CARD, "text": {}}, "the card: 'text' has no 'description'"),
    "tokens-text": ({**QUALITY_CARD, "text": {**TEXT, "tokens": "1"}}, "the card: 'text.tokens' is str, not int"),
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
    runs = QualityRuns(EventBus(), paths)
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
     ("card", "the card is str, not an object"), ({"results": {}}, "'results' is dict, not list"),
     ({"schema_version": 99}, "card schema 99 is not one of those this ModelDeck reads"),
     ({"schema_version": "1"}, "card schema '1' is not one of those this ModelDeck reads")],
)  # fmt: skip
def test_a_card_of_the_wrong_shape_is_a_value_error(content: Any, why: str) -> None:
    for card_class, good in ((QualityCard, QUALITY_CARD), (BenchCard, BENCH_CARD)):
        data = {**good, **content} if isinstance(content, dict) else content
        with pytest.raises(ValueError, match=re.escape(why)):
            card_class.from_dict(data)


def test_comparing_with_an_unreadable_card_through_the_api_is_a_clear_400(paths: AppPaths, tmp_path: Path) -> None:
    write_cards(paths.bench_dir, BENCH_CARD, BAD_BENCH)
    write_cards(quality_dir(paths), QUALITY_CARD, BAD_QUALITY)
    service = start_service_process(paths, tmp_path)
    try:
        client = service.client
        for compare, good, bad in ((client.compare_bench_cards, BENCH_CARD, BAD_BENCH),
                                   (client.compare_quality_cards, QUALITY_CARD, BAD_QUALITY)):  # fmt: skip
            for name, (_, why) in bad.items():
                for first, second in ((good["id"], name), (name, good["id"])):
                    with pytest.raises(ControlError) as refused:
                        compare(first, second)
                    assert refused.value.status == 400, (name, refused.value.status, str(refused.value))
                    assert f"The card {name!r} cannot be read" in str(refused.value) and why in str(refused.value)
            assert compare(good["id"], good["id"])[0] == ["card", good["id"], good["id"]]
        assert [card["id"] for card in client.bench()["cards"]] == [BENCH_CARD["id"]]
        assert [card["id"] for card in client.quality()["cards"]] == [QUALITY_CARD["id"]]
    finally:
        stop_service_process(service)
    assert "Traceback" not in service.output()


def test_comparing_with_an_unreadable_card_on_the_command_line_says_why(paths: AppPaths) -> None:
    write_cards(paths.bench_dir, BENCH_CARD, {"model-empty": BAD_BENCH["model-empty"]})
    write_cards(quality_dir(paths), QUALITY_CARD, {"text-empty": BAD_QUALITY["text-empty"]})
    for kind, good, bad in (("bench", BENCH_CARD, "model-empty"), ("quality", QUALITY_CARD, "text-empty")):
        done = modeldeck(kind, "--compare", good["id"], bad, timeout=120)
        assert done.returncode == 2 and done.stdout == "", done.stderr
        assert done.stderr == f"modeldeck: cannot read the card {bad}: {(BAD_BENCH | BAD_QUALITY)[bad][1]}\n"


def test_comparing_with_a_card_file_that_is_no_json_names_it(paths: AppPaths, tmp_path: Path) -> None:
    """It said "cannot read the card: Expecting value: line 1 column 1 (char 0)", not which of the two."""
    write_cards(paths.bench_dir, BENCH_CARD, {})
    write_cards(quality_dir(paths), QUALITY_CARD, {})
    mangled = tmp_path / "mangled.json"
    mangled.write_text("| concurrency | output tok/s |\n")  # the Markdown card, say, saved as its JSON
    (paths.bench_dir / "by-id.json").write_text("")
    (quality_dir(paths) / "by-id.json").write_text("")
    for kind, good in (("bench", BENCH_CARD), ("quality", QUALITY_CARD)):
        for bad in (str(mangled), "by-id"):
            done = modeldeck(kind, "--compare", good["id"], bad, timeout=120)
            assert done.returncode == 2 and done.stdout == "", done.stderr
            assert done.stderr == (
                f"modeldeck: cannot read the card {bad}: it is not JSON (Expecting value: line 1 column 1 (char 0))\n"
            )


def test_recommend_reads_past_an_unreadable_quality_card(paths: AppPaths) -> None:
    write_cards(quality_dir(paths), QUALITY_CARD, {"a-list": BAD_QUALITY["a-list"]})
    done = modeldeck("recommend", BUNDLED_ID, "--hardware", str(HARDWARE), "--json", timeout=120)
    assert done.returncode in (0, 1) and json.loads(done.stdout)["model"], done.stderr
    assert "a-list.json" in done.stderr and "Traceback" not in done.stderr


# `modeldeck bench|quality ARGS` in a child whose files may not grow past LIMIT bytes, the run itself replaced by
# one that returns CARD: what is left is saving it.
SAVE_UNDER_A_LIMIT = """
import json, resource, signal, sys, types
import app.bench.sweep, app.cli.bench, app.cli.entry, app.quality.run
from app.bench.card import BenchCard
from app.quality.card import QualityCard

kind, card, limit = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
if kind == "bench":
    app.cli.bench.connect = lambda paths: type("Client", (), {"close": lambda self: None})()
    app.bench.sweep.run_sweep = lambda *args, **kwargs: BenchCard.from_dict(card)
else:
    setup = types.SimpleNamespace(reference=types.SimpleNamespace(id="m.f16"), text=types.SimpleNamespace(
        description="a text"))
    app.quality.run.prepare = lambda *args, **kwargs: setup
    app.quality.run.run_quality = lambda *args, **kwargs: QualityCard.from_dict(card)
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
app.cli.entry.main([kind, "m", *sys.argv[4:]])
"""


@pytest.mark.parametrize("kind", ["bench", "quality"])
def test_a_card_that_cannot_be_written_whole_leaves_nothing_and_says_why(paths: AppPaths, kind: str) -> None:
    directory, good = (paths.bench_dir, BENCH_CARD) if kind == "bench" else (quality_dir(paths), QUALITY_CARD)
    write_cards(directory, good, {})
    before = {path.name: path.read_bytes() for path in directory.iterdir()}
    new = {**good, "id": "20261201-120000-new", "results": good["results"] * 5}
    card = BenchCard.from_dict(new) if kind == "bench" else QualityCard.from_dict(new)
    markdown = to_markdown(card) if isinstance(card, BenchCard) else quality_markdown(card)
    # The Markdown fits, the JSON does not: the old way left a JSON cut short, and no Markdown.
    limit = (len(markdown.encode()) + len(json.dumps(new, indent=2).encode())) // 2
    assert len(markdown.encode()) < limit < len(json.dumps(new, indent=2).encode())
    done = subprocess.run([sys.executable, "-c", SAVE_UNDER_A_LIMIT, kind, json.dumps(new), str(limit), "--json"],
                          capture_output=True, text=True, cwd=REPO, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert f"but could not save the card {new['id']} in {directory}: File too large" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert {path.name: path.read_bytes() for path in directory.iterdir()} == before, "no part of it, the rest kept"

    # With room for it, the same run saves it whole.
    done = subprocess.run([sys.executable, "-c", SAVE_UNDER_A_LIMIT, kind, json.dumps(new), str(2**30), "--json"],
                          capture_output=True, text=True, cwd=REPO, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads((directory / f"{new['id']}.json").read_text()) == card.to_dict()
    assert (directory / f"{new['id']}.md").read_text() == markdown
    assert {path.name for path in directory.iterdir()} == {*before, f"{new['id']}.json", f"{new['id']}.md"}


@pytest.mark.parametrize("kind", ["bench", "quality"])
def test_a_run_whose_card_cannot_be_saved_still_prints_it_with_json(paths: AppPaths, kind: str) -> None:
    directory, good = (paths.bench_dir, BENCH_CARD) if kind == "bench" else (quality_dir(paths), QUALITY_CARD)
    card = BenchCard.from_dict(good) if kind == "bench" else QualityCard.from_dict(good)
    ran = "the benchmark ran" if kind == "bench" else "the quality run ended"
    # Tests may run as root, whom no folder mode stops: a file stands where the cards folder should be.
    directory.parent.mkdir(parents=True, exist_ok=True)
    directory.write_text("not a folder")
    done = subprocess.run([sys.executable, "-c", SAVE_UNDER_A_LIMIT, kind, json.dumps(good), str(2**30), "--json"],
                          capture_output=True, text=True, cwd=REPO, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert json.loads(done.stdout) == card.to_dict()
    assert done.stderr.splitlines() == [
        f"modeldeck: {ran}, but could not save the card {good['id']} in {directory}: File exists"
    ]
    assert directory.read_text() == "not a folder"


def test_a_quality_run_whose_card_cannot_be_saved_still_shows_its_figures(paths: AppPaths) -> None:
    quality_dir(paths).parent.mkdir(parents=True, exist_ok=True)
    quality_dir(paths).write_text("not a folder")
    done = subprocess.run([sys.executable, "-c", SAVE_UNDER_A_LIMIT, "quality", json.dumps(QUALITY_CARD), str(2**30)],
                          capture_output=True, text=True, cwd=REPO, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert done.stdout.splitlines() == results_table(QualityCard.from_dict(QUALITY_CARD).results)
    assert done.stderr.splitlines() == [
        "reference m.f16; text: a text",
        f"modeldeck: the quality run ended, but could not save the card {QUALITY_CARD['id']} in {quality_dir(paths)}: "
        "File exists",
    ]


def test_a_cpu_without_a_model_name_reads_as_unknown_on_the_cards() -> None:
    # Arm kernels often print no model name in /proc/cpuinfo: the profile holds None (app.hardware.cpu).
    recorded = HardwareProfile.from_file(HARDWARE)
    profile = dataclasses.replace(recorded, cpu=dataclasses.replace(recorded.cpu, model=None, physical_cores=None))
    hardware = hardware_fingerprint(profile.to_dict())
    bench = to_markdown(BenchCard.from_dict({**BENCH_CARD, "hardware": hardware}))
    quality = quality_markdown(QualityCard.from_dict({**QUALITY_CARD, "hardware": hardware}))
    for markdown in (bench, quality):
        assert f"- Hardware {hardware['id']}: unknown CPU, 32 logical cores" in markdown
        assert "None" not in markdown
