"""A file on the Hub as its metadata describes it: what a download fetches and a store names paths for."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RemoteFile:
    """A file on the Hub as its metadata describes it."""

    repo_id: str
    filename: str
    revision: str
    commit: str
    etag: str  # the blob's name in the cache: the LFS sha256, or the git blob sha1 of a small file
    size: int
    url: str

    @property
    def sha256(self) -> str | None:
        return self.etag if len(self.etag) == 64 else None
