"""The library as the control API shows and changes it: sizes on disk, free space, verify, delete and import.

Every function here blocks on the disk (hashing gigabytes, copying a file): the routes run them on threads.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any

from app.hub import confined
from app.hub.cache import RepoCache
from app.hub.download import disk_free
from app.hub.library import ModelSpec, model_id_from_filename
from app.hub.pulled import PulledModel, forget_pull, load_pulled
from app.hub.safetensors_check import check_model_folder
from app.paths import AppPaths
from app.task import TaskState
from engines.gguf import GGUFError, read_gguf_info

HASH_BLOCK = 1 << 20
COPY_BLOCK = 64 << 20
_HUB_HASH = re.compile(r"[0-9a-f]{64}|[0-9a-f]{40}")
DELETABLE_SOURCES = frozenset({"hub", "local"})


class LibraryError(Exception):
    """A library request that cannot be done; `status` is the HTTP status, the message says why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Verdict:
    """The outcome of a verification: each check in words, and whether all of them passed."""

    ok: bool
    checks: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "checks": list(self.checks)}


def pulled_by_id(paths: AppPaths) -> dict[str, PulledModel]:
    return {model.id: model for model in load_pulled(paths)}


def model_files(spec: ModelSpec, pulled: PulledModel | None) -> list[Path]:
    """The files a model is made of: a pull's recorded files, a folder's files, or the one GGUF file."""
    if pulled is not None:
        return [Path(file) for file in pulled.files]
    if spec.path is not None and spec.path.is_dir():
        return sorted(file for file in spec.path.iterdir() if file.is_file())
    return [spec.path] if spec.path is not None else []


def _size_on_disk(files: list[Path]) -> int:
    return sum(file.stat().st_size for file in files if file.is_file())


def describe_library(
    models: dict[str, ModelSpec], paths: AppPaths, cache_dir: Path, downloads_dir: Path | None = None
) -> dict[str, Any]:
    """Every model with a file, its size on disk and origin, and the free space where models are kept."""
    pulled = pulled_by_id(paths)
    entries = []
    for spec in models.values():
        if spec.path is None:
            continue  # an external server: nothing on disk
        origin = pulled.get(spec.id)
        entries.append({
            "id": spec.id, "name": spec.name, "source": spec.source, "path": str(spec.path),
            "size_on_disk": _size_on_disk(model_files(spec, origin)), "deletable": spec.source in DELETABLE_SOURCES,
            "repo": origin.repo_id if origin else None, "variant": origin.variant if origin else None,
        })  # fmt: skip
    return {
        "models": entries,
        "disk": [
            {"what": "models folder", "path": str(paths.models_dir), "free": disk_free(paths.models_dir)},
            {"what": "Hugging Face cache", "path": str(cache_dir), "free": disk_free(cache_dir)},
            *(
                [{"what": "downloads folder", "path": str(downloads_dir), "free": disk_free(downloads_dir)}]
                if downloads_dir is not None
                else []
            ),
        ],
    }


def verify(spec: ModelSpec, pulled: PulledModel | None) -> Verdict:
    """A pulled file's hash against the name the Hub gave its blob (the LFS sha256, or the git blob sha1 of a small
    file); then what an engine will read: each GGUF header, or the safetensors folder's config and shard headers."""
    checks: list[str] = []
    ok = True
    files = model_files(spec, pulled)
    for index, file in enumerate(files):
        if not file.is_file():
            return Verdict(False, (*checks, f"{file.name} is missing: download the model again"))
        expected = _expected_hash(file, index, pulled)
        if expected is not None and _HUB_HASH.fullmatch(expected):
            kind, actual = ("sha256", _sha256(file)) if len(expected) == 64 else ("git hash", _git_sha1(file))
            if actual == expected:
                checks.append(f"{file.name}: {kind} matches the Hub's ({expected[:12]}\N{HORIZONTAL ELLIPSIS})")
            else:
                ok = False
                checks.append(f"{file.name} is damaged: its {kind} is {actual}, the Hub's is {expected}; delete it "
                              "and download it again")  # fmt: skip
        if file.name.lower().endswith(".gguf"):
            try:
                read_gguf_info(file)
                checks.append(f"{file.name}: the GGUF header is sound")
            except GGUFError as exc:
                ok = False
                checks.append(str(exc))
    if any(file.name.endswith(".safetensors") for file in files):
        try:
            check_model_folder(files)
            checks.append("config.json and every safetensors header are sound")
        except (OSError, ValueError) as exc:
            ok = False
            checks.append(f"not a model vLLM can serve: {exc}")
    return Verdict(ok, tuple(checks))


def _expected_hash(file: Path, index: int, pulled: PulledModel | None) -> str | None:
    """The Hub's hash of a pulled file: recorded at the pull, else the name of the cache blob it links to."""
    if pulled is None:
        return None
    if len(pulled.hashes) == len(pulled.files):
        return pulled.hashes[index]
    return file.resolve().name


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as source:
        while block := source.read(HASH_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def _git_sha1(path: Path) -> str:
    digest = hashlib.sha1(b"blob %d\0" % path.stat().st_size)
    with path.open("rb") as source:
        while block := source.read(HASH_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def delete_files(spec: ModelSpec, paths: AppPaths) -> None:
    """Delete a pulled model (its snapshot entries, and the blobs no other snapshot links to, and its index entry)
    or an imported file. Nothing outside the model's own cache folder or the models folder is touched, and no link
    is followed (app.hub.confined)."""
    try:
        if spec.source == "hub":
            pulled = pulled_by_id(paths).get(spec.id)
            entries = [_snapshot_entry(Path(file), pulled) for file in pulled.files] if pulled else []
            forget_pull(paths, spec.id)
            _delete_snapshot_entries(entries)
        elif spec.source == "local" and spec.path is not None:
            if spec.path.is_dir():
                raise LibraryError(403, f"{spec.path} is a folder you placed there; delete it yourself if you mean to.")
            if spec.path.resolve().parent != paths.models_dir.resolve():
                raise LibraryError(
                    403, f"{spec.path} is outside the models folder; ModelDeck deletes only its own files."
                )
            confined.remove(paths.models_dir, PurePath(_entry_name(spec, paths.models_dir)))
        else:
            raise LibraryError(403, f"{spec.name} is {spec.source}, not downloaded or imported: it cannot be deleted.")
    except confined.ConfinedError as exc:
        raise LibraryError(403, f"Not deleted: {exc}.") from exc


def _entry_name(spec: ModelSpec, models_dir: Path) -> str:
    """The name of a local model's own entry in the models folder. Its path is resolved, so for a link in the folder
    it names the file the link points at; the library keeps the entry's name as the model's name."""
    entry = models_dir / spec.name
    if PurePath(spec.name).name == spec.name and entry.resolve() == spec.path:
        return spec.name
    return spec.path.name if spec.path is not None else spec.name


@dataclass(frozen=True)
class _SnapshotEntry:
    """One file of a pull: the cache folder holding the repository's folder, and the file's path below it."""

    root: Path
    relative: PurePath  # models--ORG--NAME/snapshots/COMMIT/FILE

    @property
    def repo(self) -> PurePath:
        return PurePath(self.relative.parts[0])


def _snapshot_entry(file: Path, pulled: PulledModel) -> _SnapshotEntry:
    """Where `file` sits in a Hugging Face cache, checked against the pull it belongs to."""
    anchor = (RepoCache(Path(), pulled.repo_id).folder_name, "snapshots", pulled.commit)
    parts = file.parts
    for start in range(len(parts) - len(anchor)):
        if parts[start : start + len(anchor)] == anchor:
            return _SnapshotEntry(Path(*parts[:start]), PurePath(*parts[start:]))
    raise confined.ConfinedError(f"{file} is not in the snapshot {pulled.commit} of {pulled.repo_id}")


def _blob_of(entry: _SnapshotEntry, target: str) -> PurePath | None:
    """The blob (repo/blobs/HASH, relative to the cache) a snapshot link's target names; None for anything else."""
    joined = os.path.normpath(os.path.join(*entry.relative.parent.parts, target))
    blob = PurePath(joined)
    if blob.parent == entry.repo / "blobs" and _HUB_HASH.fullmatch(blob.name):
        return blob
    return None


def _linked_blobs(root: Path, repo: PurePath) -> set[PurePath]:
    """Every blob that a link in the repository's snapshots still points at (links are read, never followed)."""
    linked: set[PurePath] = set()
    snapshots = root / repo / "snapshots"
    for folder, _dirs, names in os.walk(snapshots, followlinks=False):
        for name in names:
            path = Path(folder, name)
            if path.is_symlink():
                entry = _SnapshotEntry(root, path.relative_to(root))
                blob = _blob_of(entry, os.readlink(path))
                if blob is not None:
                    linked.add(blob)
    return linked


def _delete_snapshot_entries(entries: list[_SnapshotEntry]) -> None:
    candidates: dict[tuple[Path, PurePath], set[PurePath]] = {}
    for entry in entries:
        kind = confined.entry_kind(entry.root, entry.relative)
        if kind == "link":
            blob = _blob_of(entry, confined.read_link(entry.root, entry.relative))
            if blob is not None:
                candidates.setdefault((entry.root, entry.repo), set()).add(blob)
        if kind in ("link", "file"):
            confined.remove(entry.root, entry.relative)
    for (root, repo), blobs in candidates.items():
        for blob in blobs - _linked_blobs(root, repo):  # a blob another snapshot links to stays
            if confined.entry_kind(root, blob) == "file":
                confined.remove(root, blob)
    for entry in entries:
        folder = entry.relative.parent
        while len(folder.parts) > 2 and confined.remove_empty_folder(entry.root, folder):
            folder = folder.parent  # emptied folders of the snapshot, up to the snapshot's own


def import_gguf(
    source: Path, paths: AppPaths, taken: set[str], link: bool = False, state: TaskState | None = None
) -> ModelSpec:
    """Check the file is a GGUF an engine may read, then copy it into the models folder under its own name (with
    `link`, hard-link it where the disk allows, else copy). Cancelling `state` stops the copy (raising Stopped)
    and removes what it wrote."""
    if not source.is_absolute():
        raise _not_imported(400, f"give the file's full path, not {_shown(source)}.")
    try:
        if not source.is_file():
            raise _not_imported(404, f"{_shown(source)} is not a file.")
        model_id = model_id_from_filename(source.name)
        if model_id is None or not source.name.lower().endswith(".gguf"):
            raise _not_imported(400, f"{_shown(source.name)} is not named MODEL.gguf; only GGUF files can be imported.")
        read_gguf_info(source)
    except GGUFError as exc:
        raise _not_imported(422, str(exc)) from exc
    except OSError as exc:  # the path the user gave cannot be looked at: too long, a loop of links, no permission
        status = 403 if isinstance(exc, PermissionError) else 400
        raise _not_imported(status, f"{_shown(source)} cannot be read: {exc.strerror or exc}.") from exc
    target = paths.models_dir / source.name
    if target.exists() or model_id in taken:
        raise _not_imported(409, f"a model with the id {model_id} is already in the library; rename the file first.")
    paths.models_dir.mkdir(parents=True, exist_ok=True)
    if link and _hard_link(source, target):
        return ModelSpec(model_id, target.name, target.resolve(), target.stat().st_size, "local")
    # Copied under a temporary name, so an interrupted copy never appears in the library.
    partial = target.with_name(f".{target.name}.partial")
    try:
        _copy(source, partial, state)
        partial.replace(target)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise _not_imported(
            507, f"could not copy {source.name} into {paths.models_dir}: {exc.strerror or exc}"
        ) from exc
    except BaseException:  # cancelled, or Ctrl-C in `modeldeck import`: no half a model left in the folder
        partial.unlink(missing_ok=True)
        raise
    resolved = target.resolve()
    return ModelSpec(model_id, target.name, resolved, resolved.stat().st_size, "local")


def _copy(source: Path, target: Path, state: TaskState | None, in_kernel: bool = sys.platform == "linux") -> None:
    """In blocks, checking `state` after each, so that a cancelled import stops within one block rather than after
    gigabytes more. Linux copies in the kernel (sendfile, as shutil.copyfile does there): through Python's memory
    the copy took about half as long again."""
    check = state.check if state is not None else lambda: None
    with source.open("rb") as read, target.open("wb") as write:
        if in_kernel:
            offset = 0
            while sent := os.sendfile(write.fileno(), read.fileno(), offset, COPY_BLOCK):
                offset += sent
                check()
            return
        block = bytearray(COPY_BLOCK)
        while size := read.readinto(block):
            write.write(memoryview(block)[:size])
            check()


def _shown(path: Path | str, most: int = 200) -> str:
    """`path` for a message: a path of thousands of characters is cut, with its length said."""
    text = str(path)
    return text if len(text) <= most else f"{text[:most]}... ({len(text)} characters)"


def _not_imported(status: int, why: str) -> LibraryError:
    """An import refused: every reason reads alike, in the GUI as on the command line."""
    return LibraryError(status, f"Not imported: {why}")


def _hard_link(source: Path, target: Path) -> bool:
    """Hard-link the file `source` names (not a link to it); False where links cannot be (another disk, FAT)."""
    try:
        os.link(source.resolve(), target)
    except OSError:
        return False
    return True
