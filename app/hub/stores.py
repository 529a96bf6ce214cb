"""Where downloaded files go: the Hugging Face cache (shared with other tools), or a models folder the user chose.

A store names three paths per file: the partial that survives restarts, the lock held while one process fetches it,
and the final place of the verified bytes; `publish` then makes the file visible (a snapshot link in the cache).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from app.hub.cache import RepoCache, UnsafeName, check_filename, check_repo_id
from app.hub.remote_file import RemoteFile

PARTIAL_DIR = ".modeldeck-partial"


class Store(Protocol):
    """The paths of a download's files; every name is checked before it becomes a path."""

    @property
    def root(self) -> Path: ...

    @property
    def trusts_existing(self) -> bool:
        """Whether a file already at its final place is the right one without hashing it again."""
        ...

    def final(self, file: RemoteFile) -> Path: ...

    def incomplete(self, file: RemoteFile) -> Path: ...

    def lock(self, file: RemoteFile) -> Path: ...

    def publish(self, file: RemoteFile) -> Path: ...


@dataclass(frozen=True)
class HubCacheStore:
    """The standard Hugging Face cache layout (app.hub.cache): blobs named by their hash, linked into snapshots."""

    root: Path
    trusts_existing: bool = True  # a blob's name is its hash, checked when it was stored

    def final(self, file: RemoteFile) -> Path:
        return RepoCache(self.root, file.repo_id).blob(file.etag)

    def incomplete(self, file: RemoteFile) -> Path:
        return RepoCache(self.root, file.repo_id).incomplete(file.etag)

    def lock(self, file: RemoteFile) -> Path:
        return RepoCache(self.root, file.repo_id).lock(file.etag)

    def publish(self, file: RemoteFile) -> Path:
        cache = RepoCache(self.root, file.repo_id)
        cache.write_ref(file.revision, file.commit)
        return cache.link(file.etag, file.commit, file.filename)


@dataclass(frozen=True)
class FolderStore:
    """Plain files in a models folder: a GGUF (each part of a split one) directly inside it, where the library
    finds it; a safetensors model in its own subfolder `org--name`. Partials wait in a hidden folder beside them."""

    root: Path
    subfolder: str | None = None
    trusts_existing: bool = False  # a file of the same name may be another model: it is hashed first

    def final(self, file: RemoteFile) -> Path:
        return self._final(file.filename)

    def _final(self, filename: str) -> Path:
        name = check_filename(filename).rsplit("/", 1)[-1]
        return (self.root / self.subfolder / name) if self.subfolder else self.root / name

    def incomplete(self, file: RemoteFile) -> Path:
        return self.root / PARTIAL_DIR / f"{_etag(file)}.incomplete"

    def lock(self, file: RemoteFile) -> Path:
        return self.root / PARTIAL_DIR / f"{_etag(file)}.lock"

    def publish(self, file: RemoteFile) -> Path:
        return self.final(file)

    def take_back(self, placed: Iterable[str], made_folder: bool) -> None:
        """Delete the files a job placed (by their names in the repository) and, when the job made it, the model's
        subfolder once that is empty; nothing the job did not put here."""
        for filename in placed:
            self._final(filename).unlink(missing_ok=True)
        self._remove_subfolder(made_folder)

    def set_aside(self, files: Iterable[RemoteFile], placed: Iterable[str], made_folder: bool) -> None:
        """Move the files a stopped job placed back to their partials, whole: no part of a model stays where the
        library looks, and the next pull verifies and places them again without fetching them twice. The
        subfolder it made goes once empty; nothing the job did not put here moves."""
        ours = set(placed)
        for file in files:
            if file.filename in ours and self.final(file).is_file():
                os.replace(self.final(file), self.incomplete(file))
        self._remove_subfolder(made_folder)

    def _remove_subfolder(self, made_folder: bool) -> None:
        if made_folder and self.subfolder:
            try:
                (self.root / self.subfolder).rmdir()
            except OSError as exc:
                if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT):  # holds another's file, or gone
                    raise


def folder_for_repo(repo_id: str) -> str:
    """The subfolder of a safetensors model in a models folder: `org--name`."""
    return check_repo_id(repo_id).replace("/", "--")


def _etag(file: RemoteFile) -> str:
    RepoCache(Path("."), file.repo_id).blob(file.etag)  # raises UnsafeName for anything but a hash
    return file.etag


__all__ = ["FolderStore", "HubCacheStore", "Store", "UnsafeName", "folder_for_repo"]
