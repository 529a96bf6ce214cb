"""The control API's planning routes against a real service: the hardware profile, recommendations with their
command lines and calibration, and launches with the parameters a recommendation chose."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from app.client import ControlError
from app.hardware.detect import detect_hardware
from app.hub.library import BUNDLED_ID
from app.paths import AppPaths
from app.planner.calibration import CalibrationStore, Measurement
from app.planner.plans import gguf_variant
from tests.support.service import RunningService, start_service_process, stop_service_process

MIB = 1 << 20


@pytest.fixture
def bare_service(paths: AppPaths, tmp_path: Path) -> Iterator[RunningService]:
    """The service with no model started."""
    running = start_service_process(paths, tmp_path)
    yield running
    stop_service_process(running)


def _control(service: RunningService) -> httpx.Client:
    address = service.client.address
    return httpx.Client(
        base_url=address.control_url, headers={"Authorization": f"Bearer {address.token}"}, trust_env=False, timeout=30
    )


def _after(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_hardware_is_this_machines_profile(bare_service: RunningService, paths: AppPaths) -> None:
    local = detect_hardware(paths.models_dir)
    served = bare_service.client.hardware()
    assert served["cpu"]["logical_cores"] == local.cpu.logical_cores == psutil.cpu_count()
    assert served["cpu"]["physical_cores"] == local.cpu.physical_cores
    assert served["ram_total"] == local.ram_total
    assert [gpu["name"] for gpu in served["gpus"]] == [gpu.name for gpu in local.gpus]
    assert served["models_dir"] == str(paths.models_dir)
    assert served["schema_version"] == 1


def test_recommendation_for_the_bundled_model(bare_service: RunningService, bundled_gguf: Path) -> None:
    hardware = bare_service.client.hardware()
    result = bare_service.client.recommend(BUNDLED_ID, "chat")
    assert result["use"] == "chat"
    best = result["best"]
    assert best is not None and best["fits"]
    assert best["engine"] == "llama-cpp-python"
    if not hardware["gpus"]:
        assert best["tier"] == "cpu"
        assert best["parameters"]["gpu_layers"] == 0
    assert best["location"] == str(bundled_gguf)
    assert best["parameters"]["context"] == best["context"]
    command = best["command"]
    assert _after(command, "--logits_all") == "false"
    assert _after(command, "--n_ctx") == str(best["context"])
    assert _after(command, "--n_threads") == str(best["parameters"]["threads"])
    assert _after(command, "--model") == str(bundled_gguf)
    assert best["reasons"] and all(isinstance(reason, str) for reason in best["reasons"])
    assert {"weights", "kv_cache", "runtime"} <= {part["name"] for part in best["memory"]["parts"]}
    assert result["budgets"]["ram"] > 0
    assert all(option["command"] for option in result["alternatives"])

    serving = bare_service.client.recommend(BUNDLED_ID, "serve", users=3)
    assert serving["use"] == "serve"
    assert serving["best"] is not None


@pytest.mark.parametrize(
    ("query", "status", "param"),
    [
        ({"model": BUNDLED_ID, "use": "poetry"}, 400, "use"),
        ({"model": BUNDLED_ID, "use": "serve", "users": "0"}, 400, "users"),
        ({"model": BUNDLED_ID, "use": "serve", "users": "many"}, 400, "users"),
        ({"use": "chat"}, 400, "model"),
        ({"model": "no-such-model", "use": "chat"}, 404, None),
    ],
)
def test_bad_recommendation_requests(
    bare_service: RunningService, query: dict[str, str], status: int, param: str | None
) -> None:
    with _control(bare_service) as control:
        response = control.get("/api/recommend", params=query)
    assert response.status_code == status
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    if status == 404:
        assert error["code"] == "model_not_found"
        assert "no-such-model" in error["message"]


def test_recommendations_use_the_calibration_of_earlier_launches(
    bare_service: RunningService, paths: AppPaths, bundled_gguf: Path
) -> None:
    def runtime_ram() -> int:
        best = bare_service.client.recommend(BUNDLED_ID, "chat")["best"]
        return int(next(p["ram"] for p in best["memory"]["parts"] if p["name"] == "runtime"))

    before = runtime_ram()
    architecture = gguf_variant(bundled_gguf).facts.architecture
    assert architecture is not None
    store = CalibrationStore(paths.calibration_db)
    for _ in range(3):
        store.record(
            Measurement(
                "llama-cpp-python", architecture, BUNDLED_ID, context=4096, gpu_layers=0, phase="ready",
                predicted_ram=500 * MIB, predicted_vram=0, measured_ram=540 * MIB, measured_vram=None,
            )
        )  # fmt: skip
    assert runtime_ram() == before + 40 * MIB


def test_start_with_the_recommended_parameters(bare_service: RunningService) -> None:
    client = bare_service.client
    overrides = {"context": 1024, "threads": 1, "batch": 256, "gpu_layers": 0}
    record = client.start_model(BUNDLED_ID, wait=True, overrides=overrides)
    assert record["state"] == "ready", record["message"]
    assert record["plan"] == {**overrides, "parallel": 1, "draft": None, "lookup": 0}
    listed = next(m for m in client.models() if m["id"] == BUNDLED_ID)
    assert listed["plan"] == {**overrides, "parallel": 1, "draft": None, "lookup": 0}
    # The engine really runs with them: its own command line, as the kernel has it.
    argv = psutil.Process(listed["pid"]).cmdline()
    assert _after(argv, "--n_ctx") == "1024"
    assert _after(argv, "--n_threads") == "1"
    assert _after(argv, "--n_batch") == "256"

    # The same parameters again: nothing restarts. Others: refused while it runs, never a silent restart.
    assert client.start_model(BUNDLED_ID, wait=True, overrides={"context": 1024})["pid"] == listed["pid"]
    with pytest.raises(ControlError, match="is running with context 1024"):
        client.start_model(BUNDLED_ID, overrides={"context": 2048})
    with pytest.raises(ControlError, match="trained on"):
        client.start_model(BUNDLED_ID, overrides={"context": 1_000_000})
    with _control(bare_service) as control:
        bad = control.post(f"/api/models/{BUNDLED_ID}/start", content=b"{oops")
        assert bad.status_code == 400
        assert bad.json()["error"]["type"] == "invalid_request_error"
        unknown = control.post("/api/models/no-such-model/start", json={"context": 1024})
        assert unknown.status_code == 404
    assert next(m for m in client.models() if m["id"] == BUNDLED_ID)["pid"] == listed["pid"]

    # The overrides were for that launch: the next one without them gets the default plan again.
    client.stop_model(BUNDLED_ID)
    record = client.start_model(BUNDLED_ID, wait=True)
    assert record["state"] == "ready", record["message"]
    assert record["plan"]["context"] == 4096
    assert _after(psutil.Process(record["pid"]).cmdline(), "--n_ctx") == "4096"
