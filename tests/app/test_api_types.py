"""app.api_types against what the service really does: ModelState pinned to the engines' states, and the answers of
a real service on the bundled model (models, events, downloads from the stand-in Hub, benchmark runs, hardware,
recommendations) checked key by key and value by value against the TypedDicts that describe them."""

from __future__ import annotations

import types
import typing
from collections.abc import Iterator
from enum import Enum
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints, is_typeddict

import pytest

from app import api_types
from app.api_types import (
    ACTIVE,
    HAS_ENGINE,
    LAUNCHABLE,
    TROUBLED,
    AboutRecord,
    BenchCardRecord,
    BenchListing,
    BenchRunRecord,
    DownloadRecord,
    EndpointRecord,
    EngineEvent,
    HardwareRecord,
    HealthRecord,
    HubModelPage,
    HubSearchResult,
    LibraryRecord,
    ModelRecord,
    ModelState,
    RecommendationRecord,
    RemoteRecord,
    RequestRecord,
    SeriesAnswer,
    ServiceEvent,
    SettingsAnswer,
    VerdictRecord,
    event_from_json,
    model_from_json,
)
from app.client import ControlClient, ControlError
from app.hub.library import BUNDLED_ID
from app.paths import AppPaths
from engines.states import ACTIVE_STATES, EngineState
from tests.support.events import EventRecorder
from tests.support.hub_server import FakeHub, add_repo
from tests.support.newer_service import UNKNOWN_STATE, newer_service
from tests.support.service import RunningService, start_service_process, stop_service_process
from tests.support.waiting import wait_for

RUN_TIMEOUT_S = 600.0  # a busy 2-core machine decodes the bundled model at 0.5-2 tokens/s
EVENT_TYPES: dict[str, Any] = {
    get_type_hints(kind)["type"].__args__[0]: kind for kind in get_args(ServiceEvent) if kind is not EngineEvent
} | {"engine": EngineEvent, "embedding_companion": EngineEvent}


def mismatches(value: object, hint: Any, where: str = "answer") -> list[str]:
    """Where `value` (parsed JSON, states already ModelState) departs from the type `hint`; empty when it fits."""
    origin = get_origin(hint)
    if hint is Any or hint is object:
        return []
    if hint is type(None):
        return [] if value is None else [f"{where}: {value!r} is not None"]
    if origin in (Union, types.UnionType):
        found = [mismatches(value, option, where) for option in get_args(hint)]
        return [] if any(not f for f in found) else [f"{where}: {value!r} fits none of {hint}"]
    if origin is Literal:
        return [] if value in get_args(hint) else [f"{where}: {value!r} is not one of {get_args(hint)}"]
    if is_typeddict(hint):
        if not isinstance(value, dict):
            return [f"{where}: {type(value).__name__} where a {hint.__name__} belongs"]
        fields = get_type_hints(hint)
        if set(value) != set(fields):
            return [
                f"{where}: keys missing {sorted(set(fields) - set(value))}, unknown {sorted(set(value) - set(fields))}"
            ]
        return [problem for key, field in fields.items() for problem in mismatches(value[key], field, f"{where}.{key}")]
    if origin is list:
        if not isinstance(value, list):
            return [f"{where}: {value!r} is not a list"]
        (item,) = get_args(hint)
        return [problem for i, element in enumerate(value) for problem in mismatches(element, item, f"{where}[{i}]")]
    if origin is tuple:  # JSON has no tuples: a fixed-length list
        items = get_args(hint)
        if not isinstance(value, list) or len(value) != len(items):
            return [f"{where}: {value!r} is not a list of {len(items)}"]
        return [
            problem
            for i, (v, t) in enumerate(zip(value, items, strict=True))
            for problem in mismatches(v, t, f"{where}[{i}]")
        ]
    if origin is dict:
        key_type, value_type = get_args(hint)
        if not isinstance(value, dict):
            return [f"{where}: {value!r} is not an object"]
        return [
            p
            for k, v in value.items()
            for p in [*mismatches(k, key_type, where), *mismatches(v, value_type, f"{where}.{k}")]
        ]
    if isinstance(hint, type) and issubclass(hint, Enum):
        return [] if isinstance(value, hint) else [f"{where}: {value!r} is not a {hint.__name__}"]
    if hint is float:  # JSON writes 2.0 as 2 when the service holds an int
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        return [] if ok else [f"{where}: {value!r} is not a number"]
    if hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
        return [] if ok else [f"{where}: {value!r} is not a whole number"]
    if hint in (str, bool):
        return [] if isinstance(value, hint) else [f"{where}: {value!r} is not a {hint.__name__}"]
    raise AssertionError(f"the checker does not know {hint!r} (at {where})")


def assert_fits(value: object, hint: Any, where: str = "answer") -> None:
    problems = mismatches(value, hint, where)
    assert not problems, "\n".join(problems)


def assert_event_fits(event: ServiceEvent) -> None:
    assert_fits(event, EVENT_TYPES[event["type"]], f"{event['type']} event")


# The states ------------------------------------------------------------------------------------------------------


def test_model_state_is_exactly_what_the_engines_report() -> None:
    """The service reports EngineState values and nothing of its own: the client's enum must not drift from them."""
    assert {state.value for state in ModelState} == {state.value for state in EngineState}
    assert {state.value for state in ACTIVE} == {state.value for state in ACTIVE_STATES}


def test_the_named_sets_divide_the_states_as_their_names_say() -> None:
    every = set(ModelState)
    assert ACTIVE | LAUNCHABLE | {ModelState.STOPPING} == every and not ACTIVE & LAUNCHABLE
    assert ACTIVE | {ModelState.STOPPING} == HAS_ENGINE and not HAS_ENGINE & LAUNCHABLE
    assert {ModelState.FAILED, ModelState.RESTARTING} == TROUBLED
    # A plain string from JSON finds its member in a set (the values hash and compare as the strings).
    assert "ready" in ACTIVE and "stopped" in LAUNCHABLE and "loading" not in HAS_ENGINE


def test_a_state_this_client_does_not_know_is_a_clear_error() -> None:
    record = {"id": "m", "state": "loading", "embedding_companion": None}
    with pytest.raises(ValueError, match=r"'loading'.*same version"):
        model_from_json(record)
    event = {"type": "engine", "model_id": "m", "state": "ready", "previous": "warming"}
    with pytest.raises(ValueError, match="'warming'"):
        event_from_json(event)
    with pytest.raises(ValueError, match="None"):
        event_from_json({"type": "snapshot", "models": [{"id": "m", "state": None}]})
    converted = event_from_json({"type": "engine", "model_id": "m", "state": "ready", "previous": "starting"})
    assert converted["type"] == "engine" and converted["state"] is ModelState.READY
    assert converted["previous"] is ModelState.STARTING


def test_the_checker_finds_what_drifted() -> None:
    """The shape checks below can fail: a missing key, an unknown key, a wrong type, a state as a plain string."""
    run = {"run": None, "cards": []}
    assert mismatches(run, BenchListing) == []
    assert mismatches({"run": None}, BenchListing) == ["answer: keys missing ['cards'], unknown []"]
    assert mismatches({**run, "extra": 1}, BenchListing) == ["answer: keys missing [], unknown ['extra']"]
    assert mismatches({"run": None, "cards": [1]}, BenchListing) == [
        "answer.cards[0]: int where a BenchCardSummary belongs"
    ]
    assert mismatches("ready", ModelState) == ["answer: 'ready' is not a ModelState"]
    assert mismatches(True, int) and mismatches(None, str) and not mismatches(1, float | None)


# A real service --------------------------------------------------------------------------------------------------


@pytest.fixture
def hub_service(
    hub: FakeHub, paths: AppPaths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[RunningService]:
    """The service with the bundled model ready, its Hub the stand-in one, its Hub cache under tmp_path."""
    for name in ("HF_TOKEN", "HF_HUB_OFFLINE", "HF_HUB_CACHE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    running = start_service_process(paths, tmp_path, "--model", BUNDLED_ID)
    yield running
    stop_service_process(running)


def test_models_hardware_recommendations_and_downloads_fit_their_types(
    hub: FakeHub, hub_service: RunningService, gguf_bytes: bytes
) -> None:
    client = hub_service.client
    recorder = EventRecorder(client)
    try:
        models = client.models()
        assert [m["id"] for m in models if m["state"] == ModelState.READY] == [BUNDLED_ID], hub_service.output()
        for model in models:
            assert_fits(model, ModelRecord, f"model {model['id']}")
        ready = next(m for m in models if m["id"] == BUNDLED_ID)
        assert ready["plan"] is not None and ready["launch"] is not None and ready["pid"] is not None
        assert_fits(client.hardware(), HardwareRecord, "hardware")
        recommendation = client.recommend(BUNDLED_ID)
        assert recommendation["best"] is not None and recommendation["engines"]
        assert_fits(recommendation, RecommendationRecord, "recommendation")

        add_repo(hub, "org/smol-GGUF", {"smol-Q4_1.gguf": gguf_bytes})
        started = client.start_download("org/smol-GGUF", "Q4_1")
        assert_fits(started, DownloadRecord, "started download")
        wait_for(lambda: any(e["download"]["state"] == "completed" for e in recorder.of_type("download")),
                 RUN_TIMEOUT_S, "the download to complete")  # fmt: skip
        [listed] = client.downloads()
        assert listed["state"] == "completed" and listed["model_id"] is not None
        assert_fits(listed, DownloadRecord, "listed download")
        found = client.hub_search("smol")
        assert [r["id"] for r in found] == ["org/smol-GGUF"]
        assert_fits(found, list[HubSearchResult], "hub search")
        assert_fits(client.hub_model("org/smol-GGUF"), HubModelPage, "hub model page")
        library = client.library()
        assert {e["id"] for e in library["models"]} >= {BUNDLED_ID, listed["model_id"]}
        assert_fits(library, LibraryRecord, "library")
        assert_fits(client.verify_model(listed["model_id"]), VerdictRecord, "verdict")
        assert_fits(client.about(), AboutRecord, "about")
        assert_fits(client.endpoint(), EndpointRecord, "endpoint")
        assert_fits(client.health(), HealthRecord, "health")
        assert_fits(client.remotes(), list[RemoteRecord], "remotes")
        assert_fits(client.settings(), SettingsAnswer, "settings")
        # The new model comes as a fresh snapshot.
        wait_for(lambda: len(recorder.of_type("snapshot")) >= 2, 30, "a snapshot with the downloaded model")
    finally:
        recorder.close()
    snapshots = recorder.of_type("snapshot")
    assert {m["id"] for m in snapshots[-1]["models"]} >= {BUNDLED_ID, listed["model_id"]}
    for event in recorder.events:
        assert_event_fits(event)
    assert {"snapshot", "download"} <= {event["type"] for event in recorder.events}


def test_engine_events_and_benchmark_runs_fit_their_types(service: RunningService) -> None:
    client = service.client
    recorder = EventRecorder(client)
    try:
        wait_for(lambda: recorder.of_type("snapshot"), 30, "the snapshot")
        run = client.start_bench(BUNDLED_ID, [1], prompt_tokens=56, output_tokens=4, requests=2)
        assert_fits(run, BenchRunRecord, "started run")
        listing = wait_for(lambda: (b := client.bench())["run"] and b["run"]["state"] != "running" and b,
                           RUN_TIMEOUT_S, "the benchmark to end")  # fmt: skip
        assert listing["run"]["state"] == "completed", listing["run"]["error"]
        assert listing["run"]["levels"] and listing["cards"]
        assert_fits(listing, BenchListing, "bench listing")
        assert_fits(client.bench_card(listing["run"]["card_id"]), BenchCardRecord, "bench card")
        requests = client.requests()
        assert requests and {r["model"] for r in requests} == {BUNDLED_ID}
        assert_fits(requests, list[RequestRecord], "requests")
        series = client.series(60)
        assert series["series"]
        assert_fits(series, SeriesAnswer, "series")

        stopped = client.stop_model(BUNDLED_ID)
        assert stopped["state"] == ModelState.STOPPED
        assert_fits(stopped, ModelRecord, "stopped model")
        client.start_model(BUNDLED_ID, wait=True)
        wait_for(lambda: any(e["state"] == ModelState.READY for e in recorder.of_type("engine")),
                 60, "the engine's ready event")  # fmt: skip
    finally:
        recorder.close()
    states = [(e["previous"], e["state"]) for e in recorder.of_type("engine")]
    assert (ModelState.READY, ModelState.STOPPING) in states and ModelState.STARTING in [s for _, s in states]
    assert recorder.of_type("bench") and recorder.of_type("log")
    for event in recorder.events:
        assert_event_fits(event)


def test_every_answer_type_is_exported() -> None:
    public = {name for name in dir(api_types) if not name.startswith("_") and name[0].isupper()}
    exported = set(api_types.__all__)
    assert public - {"Any", "Literal", "TypedDict", "StrEnum"} <= exported, public - exported
    assert typing.get_type_hints(ModelRecord)["state"] is ModelState


def test_a_newer_service_state_is_a_control_error_naming_it() -> None:
    """Both ways a state comes in (a listing and the event stream) refuse one this client lacks, saying which."""
    with newer_service() as address:
        client = ControlClient(address)
        try:
            with pytest.raises(ControlError, match=f"'{UNKNOWN_STATE}'"):
                client.models()
            with pytest.raises(ControlError, match=f"'{UNKNOWN_STATE}'"):
                list(client.events())
        finally:
            client.close()
