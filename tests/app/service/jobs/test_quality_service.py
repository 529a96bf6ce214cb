"""Quality runs through the control API (what the window does), on the real service, the bundled model and its
variants made with `modeldeck quantize`: progress as `quality` events, a card listed and compared; a card that
cannot be saved fails the run with the reason, its figures kept; a cancel leaves no process; one run at a time; bad
requests refused with a reason."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from app.client import ControlError
from app.hub.library import BUNDLED_ID
from app.installs.llama_tools_build import TOOLS_ENV
from app.paths import AppPaths
from app.quality.card import quality_dir
from tests.support.events import EventRecorder
from tests.support.quality_tools import Q2_K, Q4_0, TOKENS
from tests.support.service import RunningService, start_service_process, stop_service_process
from tests.support.waiting import wait_for

RUN_TIMEOUT_S = 600.0


@pytest.fixture
def quality_service(paths: AppPaths, tmp_path: Path, with_variants: dict[str, Path]) -> Iterator[RunningService]:
    """The service with no model loaded; its library holds the bundled model and the two made variants."""
    running = start_service_process(paths, tmp_path)
    yield running
    stop_service_process(running)


def perplexity_processes(service: RunningService) -> list[psutil.Process]:
    found = []
    for child in psutil.Process(service.process.pid).children(recursive=True):
        try:
            if child.name().startswith("llama-perplexi"):
                found.append(child)
        except psutil.NoSuchProcess:
            continue
    return found


def test_a_run_through_the_api_publishes_progress_and_saves_a_card(quality_service: RunningService) -> None:
    client = quality_service.client
    events = EventRecorder(client, "quality")
    try:
        assert events.opened.wait(30)
        started = client.start_quality(BUNDLED_ID, tokens=int(TOKENS))
        assert started["state"] == "running"
        with pytest.raises(ControlError) as busy:
            client.start_quality(BUNDLED_ID, tokens=int(TOKENS))
        assert busy.value.status == 409
        run = wait_for(lambda: (r := client.quality()["run"]) and r["state"] != "running" and r, RUN_TIMEOUT_S,
                       "the quality run's end")  # fmt: skip
        assert run["state"] == "completed", run
        assert [r["id"] for r in run["results"]] == [BUNDLED_ID, Q4_0, Q2_K] or {r["id"] for r in run["results"]} == {
            BUNDLED_ID,
            Q4_0,
            Q2_K,
        }
        wait_for(
            lambda: events.values("run") and events.values("run")[-1]["state"] == "completed", 30, "the last event"
        )
    finally:
        events.close()
    steps = [r["step"] for r in events.values("run")]
    assert steps == sorted(steps) and max(steps) == 2, "one step per variant, in order"
    listed = client.quality()["cards"]
    assert [c["id"] for c in listed] == [run["card_id"]]
    card = client.quality_card(run["card_id"])
    assert card["reference"] == BUNDLED_ID and len(card["results"]) == 3
    rows = client.compare_quality_cards(run["card_id"], run["card_id"])
    assert ["reference", BUNDLED_ID, BUNDLED_ID] in rows


def test_a_run_of_a_model_in_a_models_dir_folder_measures_it(
    paths: AppPaths, tmp_path: Path, made_variants: dict[str, Path], llama_tools: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check before the run and the run's child read the folders the service serves, not only its own."""
    monkeypatch.setenv(TOOLS_ENV, str(llama_tools))
    mine = tmp_path / "my-models"
    mine.mkdir()
    for path in made_variants.values():
        shutil.copy2(path, mine / path.name)
    service = start_service_process(paths, tmp_path, "--models-dir", str(mine))
    try:
        client = service.client
        client.start_quality(Q4_0, tokens=int(TOKENS))
        run = wait_for(lambda: (r := client.quality()["run"]) and r["state"] != "running" and r, RUN_TIMEOUT_S,
                       "the quality run's end")  # fmt: skip
    finally:
        stop_service_process(service)
    assert run["state"] == "completed", run
    assert {r["id"] for r in run["results"]} == {BUNDLED_ID, Q4_0, Q2_K}


def test_a_run_whose_card_cannot_be_saved_fails_saying_why_and_keeps_its_figures(
    quality_service: RunningService, paths: AppPaths
) -> None:
    # Tests may run as root, whom no folder mode stops: a file stands where the cards folder should be.
    quality_dir(paths).parent.mkdir(parents=True, exist_ok=True)
    quality_dir(paths).write_text("not a folder")
    client = quality_service.client
    client.start_quality(BUNDLED_ID, tokens=int(TOKENS))
    run = wait_for(lambda: (r := client.quality()["run"]) and r["state"] != "running" and r, RUN_TIMEOUT_S,
                   "the quality run's end")  # fmt: skip
    assert run["state"] == "failed" and run["card_id"] is None, run
    assert run["error"].startswith("modeldeck: the quality run ended, but could not save the card "), run["error"]
    assert run["error"].endswith(f" in {quality_dir(paths)}: File exists") and "\n" not in run["error"]
    assert {r["id"] for r in run["results"]} == {BUNDLED_ID, Q4_0, Q2_K}, "what was measured is not lost"
    assert quality_dir(paths).read_text() == "not a folder"


def test_cancel_stops_the_tool_and_leaves_no_process(quality_service: RunningService, paths: AppPaths) -> None:
    client = quality_service.client
    client.start_quality(BUNDLED_ID, tokens=8192)  # many seconds of work: it is cancelled long before its end
    wait_for(lambda: perplexity_processes(quality_service), 120, "llama-perplexity to start")
    cancelled = client.cancel_quality()
    assert cancelled["state"] == "cancelled"
    assert not perplexity_processes(quality_service)
    assert not psutil.Process(quality_service.process.pid).children(recursive=True), "nothing is left running"
    assert client.quality()["cards"] == [] and client.quality()["run"]["card_id"] is None
    assert not list(paths.cache.glob("quality-*")), "the scratch folder with the reference's logits is removed"
    with pytest.raises(ControlError) as nothing:
        client.cancel_quality()
    assert nothing.value.status == 409


BAD_REQUESTS = [
    ({}, 400, "`model` is required"),
    ({"model": "no-such-model"}, 404, "Unknown model"),
    ({"model": BUNDLED_ID, "tokens": 3}, 400, "`tokens` must be"),
    ({"model": BUNDLED_ID, "tokens": True}, 400, "`tokens` must be"),
    ({"model": BUNDLED_ID, "variants": "all"}, 400, "`variants` must be a list"),
    ({"model": BUNDLED_ID, "variants": ["nope"]}, 404, "Unknown model"),
    ({"model": BUNDLED_ID, "data": "/no/such/file.txt"}, 400, "is not a file"),
    ({"model": BUNDLED_ID, "colour": "red"}, 400, "Unknown field"),
    # What the run's child would fail on a moment later is refused before it starts, naming the field.
    ({"model": BUNDLED_ID, "reference": "../../etc/passwd"}, 400, "`reference` must be a model id or the absolute"),
    ({"model": BUNDLED_ID, "reference": "/no/such/model.gguf"}, 400, "Reference '/no/such/model.gguf' is neither"),
    ({"model": BUNDLED_ID, "reference": "/etc/passwd"}, 400, "Passwd is not a readable GGUF file"),
    ({"model": BUNDLED_ID, "variants": [BUNDLED_ID]}, 400, f"has no other variant to compare with {BUNDLED_ID}"),
]


def test_bad_quality_requests_get_a_clear_error(quality_service: RunningService, tmp_path: Path) -> None:
    client = quality_service.client
    not_text = tmp_path / "not-text.txt"
    not_text.write_bytes(b"\xff\xfe text")
    bad = [*BAD_REQUESTS, ({"model": BUNDLED_ID, "data": str(not_text)}, 400, "`data`: ")]
    for body, status, words in bad:
        with pytest.raises(ControlError) as refused:
            client._call("POST", "/api/quality", json=body)
        assert refused.value.status == status and words in str(refused.value), (body, str(refused.value))
    address = client.address
    with httpx.Client(headers={"Authorization": f"Bearer {address.token}"}, trust_env=False) as api:
        answer = api.post(f"{address.control_url}/api/quality", json={"model": BUNDLED_ID, "reference": "/etc/passwd"})
    assert (answer.status_code, answer.json()["error"]["param"]) == (400, "reference")
    # The body itself (read by the routes it shares with benchmarks): not JSON, no object, over the limit.
    for content, status, words in [
        (b"{not json", 400, "The body must be JSON."),
        (b"[1]", 400, 'The body must be a JSON object such as {"model": "ID"}.'),
        (b'{"model": "' + b"m" * 20_000 + b'"}', 413, "The body is over 16384 bytes."),
    ]:
        with pytest.raises(ControlError) as body_refused:
            client._call("POST", "/api/quality", content=content, headers={"content-type": "application/json"})
        assert (body_refused.value.status, str(body_refused.value)) == (status, words), content
    with pytest.raises(ControlError) as one_card:
        client._call("GET", "/api/quality/compare", params={"a": "one"})
    assert one_card.value.status == 400 and "`a` and `b`" in str(one_card.value)
    with pytest.raises(ControlError) as missing:
        client.quality_card("20260101-000000-nothing")
    assert missing.value.status == 404 and "No quality card" in str(missing.value)
    with pytest.raises(ControlError) as odd:
        client._call("GET", "/api/quality/cards/..%2Fsecret")  # a hostile request, not our client
    assert odd.value.status in (400, 404)
    assert client.quality()["run"] is None and not perplexity_processes(quality_service)
