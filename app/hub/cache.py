"""The standard Hugging Face cache layout, shared with every other tool that uses it.

<cache>/models--ORG--NAME/blobs/<etag>                  the file's bytes, named by its etag
<cache>/models--ORG--NAME/blobs/<etag>.incomplete       a partial download, resumed across processes
<cache>/models--ORG--NAME/snapshots/<commit>/<file>     a relative symlink to the blob
<cache>/models--ORG--NAME/refs/<revision>               the commit the revision pointed to
<cache>/.locks/models--ORG--NAME/<etag>.lock            held while one process downloads the blob
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from huggingface_hub import constants

_REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}")
_HEX = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_REVISION = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


class UnsafeName(ValueError):
    """A repository id, file name, revision or etag that could lead a path outside the cache."""


def default_cache_dir() -> Path:
    """huggingface_hub's cache (HF_HUB_CACHE, or HF_HOME/hub), so other tools find what ModelDeck fetched."""
    return Path(constants.HF_HUB_CACHE)


def check_repo_id(repo_id: str) -> str:
    if not _REPO_ID.fullmatch(repo_id) or ".." in repo_id:
        raise UnsafeName(f"not a Hub model id: {repo_id!r} (expected organization/name)")
    return repo_id


def check_filename(name: str) -> str:
    """A file path inside a repository: relative, forward slashes, no `..`, no empty or hidden tricks."""
    path = PurePosixPath(name)
    if (
        not name
        or "\\" in name
        or "\0" in name
        or path.is_absolute()
        or any(part in ("", ".", "..") for part in name.split("/"))
        or re.match(r"^[A-Za-z]:", name)
    ):
        raise UnsafeName(f"refusing the file name {name!r}: it could point outside the model folder")
    return name


@dataclass(frozen=True)
class RepoCache:
    """Paths of one model repository in the cache. Every name is checked before it becomes a path."""

    root: Path
    repo_id: str

    @property
    def folder_name(self) -> str:
        return "models--" + check_repo_id(self.repo_id).replace("/", "--")

    @property
    def repo_dir(self) -> Path:
        return self.root / self.folder_name

    def blob(self, etag: str) -> Path:
        if not _HEX.fullmatch(etag):
            raise UnsafeName(f"unexpected etag from the Hub: {etag!r}")
        return self.repo_dir / "blobs" / etag

    def incomplete(self, etag: str) -> Path:
        return self.blob(etag).with_name(etag + ".incomplete")

    def lock(self, etag: str) -> Path:
        return self.root / ".locks" / self.folder_name / f"{etag}.lock"

    def snapshot_file(self, commit: str, filename: str) -> Path:
        if not _HEX.fullmatch(commit):
            raise UnsafeName(f"unexpected commit from the Hub: {commit!r}")
        return self.repo_dir / "snapshots" / commit / check_filename(filename)

    def ref(self, revision: str) -> Path:
        if not _REVISION.fullmatch(revision):
            raise UnsafeName(f"unsupported revision name: {revision!r}")
        return self.repo_dir / "refs" / revision

    def link(self, etag: str, commit: str, filename: str) -> Path:
        """Point the snapshot's file at the blob (a relative symlink, or a copy where links are not allowed)."""
        target = self.snapshot_file(commit, filename)
        target.parent.mkdir(parents=True, exist_ok=True)
        blob = self.blob(etag)
        if target.is_symlink() or target.exists():
            target.unlink()
        try:
            target.symlink_to(os.path.relpath(blob, target.parent))
        except OSError:  # Windows without developer mode: huggingface_hub copies too
            shutil.copy2(blob, target)
        return target

    def write_ref(self, revision: str, commit: str) -> None:
        ref = self.ref(revision)
        ref.parent.mkdir(parents=True, exist_ok=True)
        if not ref.exists() or ref.read_text(encoding="utf-8").strip() != commit:
            ref.write_text(commit, encoding="utf-8")
