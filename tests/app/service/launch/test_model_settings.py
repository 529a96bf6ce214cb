"""Per-model load settings against a real service on the bundled model: saved 0600 in the config folder, refused
field by field with nothing lost, and used by JIT starts after a service restart and after an idle stop."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import httpx
import pytest

from app.client import ControlError
from app.hub.library import BUNDLED_ID
from app.paths import AppPaths
from app.service.launch.model_settings import FILE_NAME, ModelSettingsStore
from app.service.launch.overrides import PlanOverrides
from tests.support.service import RunningService, start_service_process, stop_service_process
from tests.support.waiting import wait_for

SAVED = {"context": 2048, "threads": 1, "batch": 128}


def _chat(service: RunningService) -> None:
    answer = service.openai_client().chat.completions.create(
        model=BUNDLED_ID, messages=[{"role": "user", "content": "Hi"}], max_tokens=2
    )
    assert answer.choices


def _assert_started_with_saved(service: RunningService) -> None:
    record = service.model()
    assert record["state"] == "ready", record["message"]
    assert {key: record["plan"][key] for key in SAVED} == SAVED
    argv = record["launch"]["argv"]
    assert "2048" in argv and "128" in argv, argv


def test_settings_survive_a_restart_and_serve_every_jit_start(paths: AppPaths, tmp_path: Path) -> None:
    service = start_service_process(paths, tmp_path, "--idle-ttl", "2")
    try:
        answer = service.client.save_model_settings(BUNDLED_ID, SAVED)
        assert answer["saved"] is True
        assert {key: answer["settings"][key] for key in SAVED} == SAVED
        assert answer["plan"]["context"] == 2048
        assert answer["memory"]["total_bytes"] > 0 and answer["free"]["ram_bytes"] > 0
        file = paths.config / FILE_NAME
        assert stat.S_IMODE(file.stat().st_mode) == 0o600
        assert json.loads(file.read_text())["models"][BUNDLED_ID] == SAVED
    finally:
        stop_service_process(service)

    service = start_service_process(paths, tmp_path, "--idle-ttl", "2")
    try:
        assert service.client.model_settings(BUNDLED_ID)["settings"]["context"] == 2048
        _chat(service)  # the first start of this service: a JIT start
        _assert_started_with_saved(service)
        wait_for(lambda: service.model()["state"] == "stopped", 30, "the idle stop")
        _chat(service)  # a JIT start after the idle stop
        _assert_started_with_saved(service)
        # An explicit start names its own parameters, and they win for that start.
        service.client.stop_model(BUNDLED_ID)
        service.client.start_model(BUNDLED_ID, wait=True, overrides={"context": 1024})
        assert service.model()["plan"]["context"] == 1024
        # An empty set forgets the saved one.
        service.client.stop_model(BUNDLED_ID)
        assert service.client.save_model_settings(BUNDLED_ID, {})["saved"] is False
        service.client.start_model(BUNDLED_ID, wait=True)
        assert service.model()["plan"]["context"] != 2048
    finally:
        stop_service_process(service)


BAD_FIELDS = [
    ({"context": 16}, "context"),
    ({"context": 10_000_000}, "context"),  # over what the model was trained on
    ({"threads": 0}, "threads"),
    ({"batch": "big"}, "batch"),
    ({"gpu_layers": -1}, "gpu_layers"),
    ({"engine": "no-such-engine"}, "engine"),
    ({"parallel": 4}, "parallel"),  # needs llama-server named
    ({"ctx": 4096}, "ctx"),
]


def test_a_bad_field_is_refused_by_name_and_loses_nothing(paths: AppPaths, tmp_path: Path) -> None:
    service = start_service_process(paths, tmp_path)
    try:
        service.client.save_model_settings(BUNDLED_ID, SAVED)
        before = (paths.config / FILE_NAME).read_bytes()
        token = paths.control_token_file.read_text().strip()
        for body, field in BAD_FIELDS:
            with pytest.raises(ControlError) as refused:
                service.client.save_model_settings(BUNDLED_ID, body)
            assert refused.value.status == 400, body
            assert field in str(refused.value), body
            raw = httpx.put(f"{service.client.address.control_url}/api/models/{BUNDLED_ID}/settings", json=body,
                            headers={"Authorization": f"Bearer {token}"}, trust_env=False)  # fmt: skip
            assert raw.status_code == 400 and raw.json()["error"]["param"] == field, body
            assert (paths.config / FILE_NAME).read_bytes() == before, body
        assert {key: service.client.model_settings(BUNDLED_ID)["settings"][key] for key in SAVED} == SAVED
    finally:
        stop_service_process(service)


def test_unknown_model_and_bad_json(paths: AppPaths, tmp_path: Path) -> None:
    service = start_service_process(paths, tmp_path)
    try:
        with pytest.raises(ControlError) as unknown:
            service.client.model_settings("no-such-model")
        assert unknown.value.status == 404
        with pytest.raises(ControlError) as not_object:
            service.client._call("PUT", f"/api/models/{BUNDLED_ID}/settings", content=b"[1, 2]")
        assert not_object.value.status == 400
        assert not (paths.config / FILE_NAME).exists()
        estimate = service.client.estimate_model_settings(BUNDLED_ID, {"context": 4096})
        assert estimate["saved"] is False and estimate["plan"]["context"] == 4096
        assert not (paths.config / FILE_NAME).exists()
        smaller = service.client.estimate_model_settings(BUNDLED_ID, {"context": 512})
        assert smaller["memory"]["total_bytes"] < estimate["memory"]["total_bytes"]
    finally:
        stop_service_process(service)


def test_an_unreadable_file_is_set_aside(paths: AppPaths) -> None:
    paths.config.mkdir(parents=True)
    (paths.config / FILE_NAME).write_text("{not json")
    store = ModelSettingsStore(paths.config)
    assert store.get(BUNDLED_ID) is None
    assert store.problem is not None and "model-settings.json.bad" in store.problem
    assert (paths.config / f"{FILE_NAME}.bad").read_text() == "{not json"
    store.put(BUNDLED_ID, PlanOverrides(context=1024))
    assert ModelSettingsStore(paths.config).get(BUNDLED_ID) == PlanOverrides(context=1024)


def test_an_entry_this_machine_cannot_use_is_kept_and_the_others_used(paths: AppPaths) -> None:
    """Settings copied from a machine with more cores: that model starts with its defaults, every other model keeps
    its settings, and the entry stays in the file, as it was, until that model's settings are saved again."""
    paths.config.mkdir(parents=True)
    too_many = {"threads": 4096}
    (paths.config / FILE_NAME).write_text(json.dumps(
        {"schema_version": 1, "models": {"big": too_many, BUNDLED_ID: {"context": 1024}}}
    ))  # fmt: skip
    store = ModelSettingsStore(paths.config)
    assert store.get("big") is None and store.get(BUNDLED_ID) == PlanOverrides(context=1024)
    assert store.problem is not None and "big" in store.problem and "threads" in store.problem
    assert not (paths.config / f"{FILE_NAME}.bad").exists()
    store.put(BUNDLED_ID, PlanOverrides(context=2048))
    assert json.loads((paths.config / FILE_NAME).read_text())["models"]["big"] == too_many
    store.put("big", PlanOverrides(context=512))
    assert ModelSettingsStore(paths.config).get("big") == PlanOverrides(context=512)
