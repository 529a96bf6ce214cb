"""The calibration store on files another program or a crash spoiled: planning goes on, and nothing is lost."""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from app.hub.library import BUNDLED_ID
from app.paths import AppPaths
from app.planner.calibration import CalibrationStore, Correction, Measurement
from app.service.launch.memory_check import MemoryCheck
from tests.support.service import REPO

HARDWARE = Path(__file__).parents[2] / "fixtures" / "hardware" / "rtx4090_24gb.json"


def measurement(measured_ram: int) -> Measurement:
    return Measurement(
        engine="llama-cpp-python", architecture="llama", model_id="m", context=4096, gpu_layers=0, phase="ready",
        predicted_ram=100, predicted_vram=0, measured_ram=measured_ram, measured_vram=None,
    )  # fmt: skip


def test_a_store_that_is_not_a_database_is_set_aside_once_and_a_fresh_one_learns(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "calibration.sqlite"
    garbage = os.urandom(8192)
    path.write_bytes(garbage)
    store = CalibrationStore(path)
    check = MemoryCheck(store)
    with caplog.at_level(logging.WARNING, logger="modeldeck.calibration"):
        assert check.correction("llama-cpp-python", "llama") == Correction.none()
        assert check.correction("llama-cpp-python", "llama") == Correction.none()  # the fresh store has no data
    kept = tmp_path / "calibration.sqlite.bad"
    assert kept.read_bytes() == garbage  # nothing is lost
    [warning] = [r.getMessage() for r in caplog.records]  # once: the second call found the fresh store
    assert "is not a database" in warning and "kept it as calibration.sqlite.bad" in warning

    store.record(measurement(150))
    assert store.correction("llama-cpp-python", "llama") == Correction(ram=50, vram=0, samples=1)
    assert kept.read_bytes() == garbage
    assert sorted(p.name for p in tmp_path.iterdir()) == ["calibration.sqlite", "calibration.sqlite.bad"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # the fresh store is private, as the service makes it


def test_a_store_locked_by_another_process_plans_without_a_correction_until_it_is_free(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "calibration.sqlite"
    store = CalibrationStore(path, busy_timeout_s=0.1)
    store.record(measurement(150))
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        with caplog.at_level(logging.WARNING, logger="modeldeck.calibration"):
            assert store.correction("llama-cpp-python", "llama") == Correction.none()
            unkept = store.record(measurement(170))  # a launch measured meanwhile goes on; only the row is lost
        assert unkept.measured_ram == 170 and unkept.at > 0
        messages = [r.getMessage() for r in caplog.records]
        assert len(messages) == 2 and all("database is locked" in message for message in messages), messages
        holder.execute("ROLLBACK")
    finally:
        holder.close()
    assert store.correction("llama-cpp-python", "llama") == Correction(ram=50, vram=0, samples=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["calibration.sqlite"]  # a locked store is no bad file


def test_recommend_plans_with_a_corrupt_store(paths: AppPaths) -> None:
    paths.calibration_db.parent.mkdir(parents=True, exist_ok=True)
    garbage = os.urandom(4096)
    paths.calibration_db.write_bytes(garbage)
    done = subprocess.run(
        [sys.executable, "-m", "app", "recommend", BUNDLED_ID, "--json", "--hardware", str(HARDWARE)],
        capture_output=True, text=True, timeout=120, check=False, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["best"]["tier"] == "gpu"
    assert "Traceback" not in done.stderr and "kept it as calibration.sqlite.bad" in done.stderr
    assert paths.calibration_db.with_name("calibration.sqlite.bad").read_bytes() == garbage
