"""The service's downloads kept across restarts: a small JSON file under the app's data directory.

A download the service was fetching when it stopped (or was killed) comes back paused: its partial files are still
in the cache, and resuming continues from the bytes on disk. Finished downloads are kept as a short history.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from app.bad_files import set_aside
from app.bounded_json import load_json
from app.hub.pull import PullRequest
from app.hub.variants import RepoFile, Variant
from app.paths import AppPaths
from engines.atomic_files import write_atomically

SCHEMA_VERSION = 1
KEPT_FINISHED = 50  # completed, cancelled and failed downloads remembered, newest first

log = logging.getLogger("modeldeck.downloads")


def store_path(paths: AppPaths) -> Path:
    return paths.data / "downloads.json"


def to_record(job_id: str, request: PullRequest, variant: Variant, fields: dict[str, Any]) -> dict[str, Any]:
    """What is kept of a job: what was asked, the files it fetches, and where it stood."""
    return {
        "id": job_id,
        "request": {"repo": request.repo_id, "variant": request.variant, "file": request.filename},
        "variant": {
            "name": variant.name, "quant": variant.quant, "parts_expected": variant.parts_expected,
            "files": [{"path": f.path, "size": f.size, "sha256": f.sha256} for f in variant.files],
        },
        **{key: fields[key] for key in ("state", "done", "total", "error", "model_id")},
        "models_dir": str(fields["models_dir"]) if fields.get("models_dir") else None,
        "placed": sorted(fields["placed"]),
        "made_folder": fields["made_folder"],
    }  # fmt: skip


def from_record(raw: dict[str, Any]) -> tuple[str, PullRequest, Variant, dict[str, Any]]:
    """The parts of a kept job; raises KeyError, TypeError or ValueError for a record that is not one."""
    asked, kept = raw["request"], raw["variant"]
    text = (
        asked["repo"]
        + (f":{asked['variant']}" if asked["variant"] else "")
        + (f"/{asked['file']}" if asked["file"] else "")
    )
    request = PullRequest.parse(text)  # checks the names again: the file is not trusted more than a request
    files = tuple(RepoFile(str(f["path"]), f["size"], f["sha256"]) for f in kept["files"])
    variant = Variant(str(kept["name"]), kept["quant"], files, int(kept["parts_expected"]))
    fields = {key: raw[key] for key in ("state", "done", "total", "error", "model_id")}
    if fields["state"] not in ("running", "paused", "cancelled", "failed", "completed"):
        raise ValueError(f"unknown state {fields['state']!r}")
    folder = raw.get("models_dir")
    if folder is not None and (not isinstance(folder, str) or not Path(folder).is_absolute()):
        raise ValueError(f"a models folder must be a full path, not {folder!r}")
    fields["models_dir"] = Path(folder) if folder else None
    placed = raw.get("placed", [])  # absent from a record of an earlier version
    if not isinstance(placed, list) or not set(placed) <= {f.path for f in files}:
        raise ValueError(f"the files a job placed must be files of its variant, not {placed!r}")
    fields["placed"] = set(placed)
    made_folder = raw.get("made_folder", False)  # absent from a record of an earlier version
    if not isinstance(made_folder, bool):
        raise ValueError(f"whether a job made its folder must be true or false, not {made_folder!r}")
    fields["made_folder"] = made_folder
    return str(raw["id"]), request, variant, fields


def load_records(paths: AppPaths) -> list[dict[str, Any]]:
    """The kept jobs. A file that is not a list this ModelDeck reads (damaged, or a later version's) is set aside,
    as the next save writes a new one, and reads as none: the partial files stay, and a new pull finds them."""
    path = store_path(paths)
    try:
        raw = load_json(path.read_bytes())
        if not isinstance(raw, dict) or raw.get("schema") != SCHEMA_VERSION or not isinstance(raw.get("jobs"), list):
            raise ValueError(f"it is not a list of downloads of schema {SCHEMA_VERSION}")
    except FileNotFoundError:
        return []
    except OSError as exc:
        log.warning("the list of downloads could not be read (%s); starting with none", exc.strerror or exc)
        return []
    except ValueError as exc:  # BadJson: not UTF-8, not JSON, or nested past its bound; or not our list
        log.warning("%s could not be read (%s); kept it as %s and started with none", path, exc, set_aside(path).name)
        return []
    return [job for job in raw["jobs"] if isinstance(job, dict)]


def save_records(paths: AppPaths, records: list[dict[str, Any]]) -> None:
    """Write the jobs atomically: active ones all, finished ones only the newest KEPT_FINISHED."""
    active = [r for r in records if r["state"] in ("running", "paused")]
    finished = [r for r in records if r["state"] not in ("running", "paused")][-KEPT_FINISHED:]
    keep = {id(r) for r in active + finished}
    data = {"schema": SCHEMA_VERSION, "jobs": [r for r in records if id(r) in keep]}
    write_atomically(store_path(paths), json.dumps(data, indent=1))
