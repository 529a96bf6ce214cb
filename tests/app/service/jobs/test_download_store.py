"""The file that keeps the service's downloads across restarts: damaged or tampered records lose nothing else, and a
record of an earlier version is read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.hub.cache import UnsafeName
from app.hub.pull import PullRequest
from app.hub.variants import RepoFile, Variant
from app.paths import AppPaths
from app.service.jobs.download_store import (
    KEPT_FINISHED,
    from_record,
    load_records,
    save_records,
    store_path,
    to_record,
)

VARIANT = Variant("Q4_0", "Q4_0", (RepoFile("m-Q4_0.gguf", 10, "a" * 64),), 1)
FIELDS = {
    "state": "running", "done": 3, "total": 10, "error": None, "model_id": None, "models_dir": None, "placed": set(),
    "made_folder": False,
}  # fmt: skip


def test_a_job_survives_the_round_trip(paths: AppPaths, tmp_path: Path) -> None:
    request = PullRequest.parse("org/m:Q4_0")
    into_folder = FIELDS | {"models_dir": tmp_path / "mine", "placed": {"m-Q4_0.gguf"}, "made_folder": True}
    save_records(paths, [to_record("dl-4", request, VARIANT, FIELDS), to_record("dl-5", request, VARIANT, into_folder)])
    first, second = load_records(paths)
    assert from_record(first) == ("dl-4", request, VARIANT, FIELDS)
    assert from_record(second) == ("dl-5", request, VARIANT, into_folder)
    del first["placed"], first["made_folder"]  # as an earlier version wrote it
    assert from_record(first) == ("dl-4", request, VARIANT, FIELDS)


def test_a_damaged_or_later_file_reads_as_no_jobs_and_is_kept_aside(paths: AppPaths) -> None:
    """The next save writes a new file: what the old one held (a later version's paused downloads) stays beside it."""
    path = store_path(paths)
    path.parent.mkdir(parents=True)
    later = json.dumps({"schema": 2, "jobs": [{"id": "dl-1", "state": "paused"}]})
    for n, text in enumerate(["{not json", later, "\udcff"], start=1):
        path.write_text(text, errors="surrogateescape")
        assert load_records(paths) == []
        assert not path.exists()
        kept = path.with_name("downloads.json.bad" + (f"-{n}" if n > 1 else ""))
        assert kept.read_text(errors="surrogateescape") == text


def test_a_tampered_record_is_refused(paths: AppPaths) -> None:
    raw = to_record("dl-1", PullRequest.parse("org/m/m-Q4_0.gguf"), VARIANT, FIELDS)
    raw["request"]["file"] = "../../etc/passwd"
    with pytest.raises(UnsafeName):
        from_record(raw)
    raw = to_record("dl-1", PullRequest.parse("org/m"), VARIANT, FIELDS | {"state": "exploded"})
    with pytest.raises(ValueError, match="unknown state"):
        from_record(raw)
    raw = to_record("dl-1", PullRequest.parse("org/m"), VARIANT, FIELDS) | {"models_dir": "relative/dir"}
    with pytest.raises(ValueError, match="must be a full path"):
        from_record(raw)
    # A cancel deletes what its job placed: only files of the job's own variant may be named.
    raw = to_record("dl-1", PullRequest.parse("org/m"), VARIANT, FIELDS | {"placed": {"../../etc/passwd"}})
    with pytest.raises(ValueError, match="files of its variant"):
        from_record(raw)
    raw = to_record("dl-1", PullRequest.parse("org/m"), VARIANT, FIELDS) | {"made_folder": "yes"}
    with pytest.raises(ValueError, match="must be true or false"):
        from_record(raw)


def test_only_the_newest_finished_jobs_are_kept_and_every_active_one(paths: AppPaths) -> None:
    request = PullRequest.parse("org/m")
    finished = [to_record(f"dl-{i}", request, VARIANT, FIELDS | {"state": "completed"}) for i in range(80)]
    paused = to_record("dl-0p", request, VARIANT, FIELDS | {"state": "paused"})
    save_records(paths, [paused, *finished])
    ids = [r["id"] for r in load_records(paths)]
    assert ids[0] == "dl-0p" and len(ids) == 1 + KEPT_FINISHED and ids[-1] == "dl-79"
