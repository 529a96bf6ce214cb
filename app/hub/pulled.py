"""The index of GGUF models ModelDeck pulled from the Hub: a small JSON file under the app's data directory.

The files themselves stay in the Hugging Face cache; the index remembers which snapshot files make a model and the
id it was given, so that ids stay the same from run to run whatever else appears in the library later.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from filelock import FileLock

from app.bad_files import set_aside
from app.bounded_json import load_json
from app.paths import AppPaths
from engines.atomic_files import write_atomically

SCHEMA_VERSION = 1

log = logging.getLogger("modeldeck.hub")


@dataclass(frozen=True)
class PulledModel:
    """One pulled model: its library id, where it came from, and its files in the cache (first part first)."""

    id: str
    repo_id: str
    variant: str
    commit: str
    files: tuple[str, ...]  # absolute snapshot paths
    size_bytes: int
    format: str = "gguf"  # or "safetensors": a folder vLLM serves (older index entries have no format: GGUF)
    hashes: tuple[str, ...] = ()  # the Hub's hash of each file (LFS sha256 or git blob sha1), for verify

    @property
    def path(self) -> Path:
        """What an engine is given: the GGUF file (the first part of a split one), or the safetensors folder."""
        first = Path(self.files[0])
        return first.parent if self.format == "safetensors" else first

    def present(self) -> bool:
        return all(Path(file).is_file() for file in self.files)


_FIELDS = frozenset(field.name for field in fields(PulledModel))


def index_path(paths: AppPaths) -> Path:
    return paths.data / "hub-models.json"


def load_pulled(paths: AppPaths) -> list[PulledModel]:
    """Every recorded pull; an index this ModelDeck cannot read reads as empty rather than breaking the library (the
    files stay where they are, and a pull finds them again)."""
    return _read_index(paths) or []


def _read_index(paths: AppPaths) -> list[PulledModel] | None:
    """The recorded pulls, None when there is an index but not one this ModelDeck reads (damaged, or newer)."""
    try:
        raw = load_json(index_path(paths).read_bytes())
    except FileNotFoundError:
        return []
    except (OSError, ValueError):  # ValueError: BadJson (not UTF-8, not JSON, or nested past its bound)
        return None
    entries = raw.get("models") if isinstance(raw, dict) and raw.get("schema") == SCHEMA_VERSION else None
    if not isinstance(entries, list):
        return None
    return [model for entry in entries if (model := _entry(entry)) is not None]


def _entry(entry: object) -> PulledModel | None:
    """One entry of the index; fields it does not know (a later version's) are left out, a broken entry is None."""
    if not isinstance(entry, dict):
        return None
    known = {name: value for name, value in entry.items() if name in _FIELDS}
    try:
        model = PulledModel(**{**known, "files": tuple(known["files"]), "hashes": tuple(known.get("hashes", ()))})
    except (TypeError, KeyError):
        return None
    return model if model.files else None


@contextmanager
def _changing(paths: AppPaths) -> Iterator[None]:
    """Hold the index for a read-change-write: downloads finish on threads of the service, and a `modeldeck pull`
    may finish beside them; without it one's entry is lost, or its temporary file replaced under it."""
    target = index_path(paths)
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(target.with_name(f".{target.name}.lock"), mode=0o600):  # private, as every file of ours
        yield


def _save(paths: AppPaths, models: list[PulledModel]) -> None:
    data = {
        "schema": SCHEMA_VERSION,
        "models": [asdict(m) | {"files": list(m.files), "hashes": list(m.hashes)} for m in models],
    }
    write_atomically(index_path(paths), json.dumps(data, indent=2))


def record_pull(
    paths: AppPaths,
    repo_id: str,
    variant: str,
    commit: str,
    files: list[Path],
    base_id: str,
    taken: set[str],
    *,
    model_format: str = "gguf",
    hashes: tuple[str, ...] = (),
) -> PulledModel:
    """Add a pull to the index (or refresh it) and return it. A repeat pull of a variant keeps its id; a new one
    gets `base_id`, or `base_id-2`, `-3`... when another model already has it."""
    with _changing(paths):
        models = _read_index(paths)
        if models is None:  # written over below: what it held is kept beside it
            log.warning("%s could not be read; kept it as %s", index_path(paths), set_aside(index_path(paths)).name)
            models = []
        previous = next((m for m in models if m.repo_id == repo_id and m.variant == variant), None)
        if previous is not None:
            model_id = previous.id
        else:
            used = taken | {m.id for m in models}
            model_id, n = base_id, 1
            while model_id in used:
                n += 1
                model_id = f"{base_id}-{n}"
        size = sum(file.stat().st_size for file in files)
        entry = PulledModel(
            model_id, repo_id, variant, commit, tuple(str(file) for file in files), size, model_format, hashes
        )
        _save(paths, [m for m in models if m.id != model_id] + [entry])
        return entry


def forget_pull(paths: AppPaths, model_id: str) -> PulledModel | None:
    """Remove a pull from the index (its files are the caller's to delete) and return it; None when unknown."""
    with _changing(paths):
        models = load_pulled(paths)
        found = next((m for m in models if m.id == model_id), None)
        if found is not None:
            _save(paths, [m for m in models if m.id != model_id])
    return found
