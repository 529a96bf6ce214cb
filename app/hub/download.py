"""Resumable, verified downloads of Hub files into the Hugging Face cache.

huggingface_hub >= 1.18 restarts an interrupted file from zero in a new process (docs/ARCHITECTURE.md), so the bytes are
fetched here: a partial `<blob>.incomplete` survives restarts and is resumed with `Range: bytes=N-`; network
errors are retried with exponential backoff (and the Hub's Retry-After); the size and the sha256 of the LFS object
(or the git blob hash of a small file) are checked before the file is moved into `blobs/` and linked into the
snapshot. Only the metadata comes from huggingface_hub (`hf_hub_url`, `get_hf_file_metadata`).
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
from filelock import FileLock, Timeout
from huggingface_hub import get_hf_file_metadata, hf_hub_url

from app.hub.cache import check_filename, check_repo_id
from app.hub.errors import HUB_FAILURES, HubError, for_status, translate
from app.hub.remote_file import RemoteFile
from app.hub.stores import HubCacheStore, Store
from app.task import Stopped, TaskState

CHUNK_BYTES = 1 << 20
FreeBytes = Callable[[Path], int]


@dataclass(frozen=True)
class RetryPolicy:
    """How network errors are retried: `attempts` in a row without progress, waits doubling up to `max_wait_s`."""

    attempts: int = 6
    first_wait_s: float = 1.0
    max_wait_s: float = 30.0
    max_retry_after_s: float = 120.0

    def wait_s(self, failures: int, retry_after_s: float | None) -> float:
        if retry_after_s is not None:
            return min(retry_after_s, self.max_retry_after_s)
        return min(self.first_wait_s * 2.0 ** (failures - 1), self.max_wait_s)


DEFAULT_RETRY = RetryPolicy()


class IntegrityError(HubError):
    """The downloaded bytes are not the file the Hub described; the partial was deleted."""


def disk_free(path: Path) -> int:
    """Free bytes on the file system that holds `path` (or its nearest existing parent)."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return shutil.disk_usage(path).free


def resolve(repo_id: str, filename: str, *, endpoint: str, token: str | None, revision: str = "main") -> RemoteFile:
    """Ask the Hub for a file's commit, etag and size (a HEAD request, no bytes)."""
    check_repo_id(repo_id)
    check_filename(filename)
    url = hf_hub_url(repo_id, filename, revision=revision, endpoint=endpoint)
    if not url.startswith(endpoint.rstrip("/") + "/"):  # hf_hub_url swaps in `endpoint` only for its own default
        raise HubError(f"cannot build a download address on {endpoint} for {repo_id}/{filename}")
    try:
        meta = get_hf_file_metadata(url, token=token or False, endpoint=endpoint)
    except HUB_FAILURES as exc:
        raise translate(exc, endpoint, repo_id, token is not None) from exc
    if meta.etag is None or meta.size is None or meta.commit_hash is None:
        raise HubError(f"the Hub sent no etag, size or commit for {repo_id}/{filename}; cannot verify it")
    return RemoteFile(repo_id, filename, revision, meta.commit_hash, meta.etag, meta.size, url)


def as_store(where: Path | Store) -> Store:
    """A path is the root of a Hugging Face cache; anything else already is a store."""
    return HubCacheStore(where) if isinstance(where, Path) else where


def check_disk(files: list[RemoteFile], where: Path | Store, free_bytes: FreeBytes = disk_free) -> None:
    """Refuse before any byte is written when the files still to fetch do not fit."""
    store = as_store(where)
    needed = sum(_missing_bytes(file, store) for file in files)
    free = free_bytes(store.root)
    if needed > free:
        raise HubError(
            f"not enough disk space in {store.root}: the download needs {needed:,} bytes ({needed / 1e9:.2f} GB) "
            f"more and {free:,} bytes ({free / 1e9:.2f} GB) are free; free some space or choose another folder "
            "(--cache-dir or --models-dir)"
        )


def _missing_bytes(file: RemoteFile, store: Store) -> int:
    if store.final(file).is_file():
        return 0
    partial = store.incomplete(file)
    have = partial.stat().st_size if partial.is_file() else 0
    return max(0, file.size - have)


def download_files(
    files: list[RemoteFile],
    where: Path | Store,
    state: TaskState,
    *,
    token: str | None,
    endpoint: str,
    retry: RetryPolicy = DEFAULT_RETRY,
    free_bytes: FreeBytes = disk_free,
) -> list[Path]:
    """Fetch every file (resuming partials), verify it, and return the paths an engine reads, in order. `where` is
    a Hugging Face cache directory or a store (app.hub.stores)."""
    store = as_store(where)
    check_disk(files, store, free_bytes)
    total = sum(file.size for file in files)
    state.begin(total, total - sum(_missing_bytes(file, store) for file in files))
    headers = {"Accept-Encoding": "identity", "User-Agent": "modeldeck"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    # Redirects go to the Hub's CDN; httpx drops the Authorization header when the host changes.
    timeout = httpx.Timeout(30.0, connect=10.0)
    with httpx.Client(headers=headers, timeout=timeout, follow_redirects=True) as client:
        paths = [_download_one(client, file, store, state, retry, endpoint) for file in files]
    state.finish()
    return paths


def _download_one(
    client: httpx.Client, file: RemoteFile, store: Store, state: TaskState, retry: RetryPolicy, endpoint: str
) -> Path:
    state.working_on(file.filename)
    final = store.final(file)
    if final.is_file() and not store.trusts_existing:
        _check_existing(file, final, state)
    elif not final.is_file():
        lock = store.lock(file)
        lock.parent.mkdir(parents=True, exist_ok=True)
        try:
            with FileLock(lock, timeout=0):
                if not final.is_file():  # checked again under the lock: another process may have just finished it
                    _fetch_with_retries(client, file, store, state, retry, endpoint)
                    _verify_and_store(file, store, state)
        except Timeout:
            raise HubError(f"{file.filename} is being downloaded by another process; wait for it to finish") from None
    return store.publish(file)


def _check_existing(file: RemoteFile, path: Path, state: TaskState) -> None:
    """A file already in a models folder under the name: kept when it is the Hub's file, never overwritten."""
    expected, actual = (
        (None, None) if path.stat().st_size != file.size else _expected_and_actual_hash(file, path, state)
    )
    if actual is None or actual != expected:
        raise HubError(
            f"{path} already exists and is not the Hub's {file.filename}; move it away or choose another folder"
        )


def _fetch_with_retries(
    client: httpx.Client, file: RemoteFile, store: Store, state: TaskState, retry: RetryPolicy, endpoint: str
) -> None:
    partial = store.incomplete(file)
    partial.parent.mkdir(parents=True, exist_ok=True)
    try:
        _retry_until_complete(client, file, partial, state, retry, endpoint)
    except Stopped as stop:
        if stop.reason == "cancel":
            partial.unlink(missing_ok=True)
        raise


def _retry_until_complete(
    client: httpx.Client, file: RemoteFile, partial: Path, state: TaskState, retry: RetryPolicy, endpoint: str
) -> None:
    failures = 0
    while True:
        state.check()
        if partial.is_symlink():
            raise HubError(
                f"{partial} is a symbolic link, not a partial download: ModelDeck never writes through links. "
                "Remove it and run the pull again."
            )
        have = partial.stat().st_size if partial.exists() else 0
        if have > file.size:  # not this file's bytes (counted as the whole file when the job began): start over
            state.advance(-file.size)
            partial.unlink()
            continue
        if have == file.size:
            return
        try:
            progressed = _fetch_range(client, file, partial, have, state, endpoint)
        except HubError as exc:
            if not exc.retryable:
                raise
            failures += 1
            if failures >= retry.attempts:
                raise HubError(f"{exc}; gave up after {failures} tries, run the pull again to resume") from exc
            state.wait(retry.wait_s(failures, exc.retry_after_s))
            continue
        if progressed:
            failures = 0


def _fetch_range(
    client: httpx.Client, file: RemoteFile, partial: Path, have: int, state: TaskState, endpoint: str
) -> bool:
    """One GET from byte `have` to the end. Returns whether any byte was written; network errors are retryable."""
    written = 0
    try:
        with client.stream("GET", file.url, headers={"Range": f"bytes={have}-"} if have else {}) as response:
            if response.status_code not in (200, 206):
                has_token = "Authorization" in client.headers
                raise for_status(
                    response.status_code, endpoint, file.repo_id, has_token,
                    response.headers.get("X-Error-Code"), response.headers.get("Retry-After"),
                )  # fmt: skip
            if have and not _resumes_at(response, have):  # the server ignored Range: take it from the start
                state.advance(-have)
                have = 0
            # Unbuffered, so every byte received is on disk even when the process is killed the next moment.
            with _open_partial(partial, have) as out:
                out.seek(have)
                out.truncate()
                # As the bytes arrive, not in fixed chunks: a stalled connection must not hold back what came.
                for chunk in response.iter_bytes():
                    if have + written + len(chunk) > file.size:
                        raise HubError(f"the Hub sent more than the {file.size:,} bytes of {file.filename}")
                    out.write(chunk)
                    written += len(chunk)
                    state.advance(len(chunk))
                    state.check()
    except httpx.TransportError as exc:
        raise HubError(f"network error while downloading {file.filename}: {exc!r}", retryable=True) from exc
    except OSError as exc:  # the disk filled up or went away after the check: keep what is there for a rerun
        raise HubError(
            f"cannot write {partial}: {exc.strerror or exc}; what was downloaded is kept, free space and run the "
            "pull again to resume"
        ) from exc
    return written > 0


def _open_partial(partial: Path, have: int) -> io.FileIO:
    """The partial file, unbuffered, for writing from `have` on; never through a symbolic link (O_NOFOLLOW): a link
    planted where the partial belongs would have the download written into whatever file it points at."""
    flags = os.O_WRONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
    fd = os.open(partial, flags if have else flags | os.O_TRUNC, 0o666)  # the cache's usual mode, less the umask
    return os.fdopen(fd, "wb", buffering=0)


def _resumes_at(response: httpx.Response, offset: int) -> bool:
    content_range = response.headers.get("Content-Range", "")
    return response.status_code == 206 and content_range.startswith(f"bytes {offset}-")


def _verify_and_store(file: RemoteFile, store: Store, state: TaskState) -> None:
    """Check size and hash of the partial, then move it into blobs. A mismatch deletes it and says so. A pause or
    cancel during hashing stops it (the complete partial stays; the next run hashes it again)."""
    partial = store.incomplete(file)
    size = partial.stat().st_size
    problem = None
    if size != file.size:
        problem = f"is {size:,} bytes, the Hub says {file.size:,}"
    else:
        expected, actual = _expected_and_actual_hash(file, partial, state)
        if actual != expected:
            problem = f"has hash {actual}, the Hub says {expected}"
    if problem:
        partial.unlink()
        raise IntegrityError(
            f"{file.filename} {problem}: the download was corrupted and has been deleted; run the pull again"
        )
    final = store.final(file)
    if store.trusts_existing:
        final.parent.mkdir(parents=True, exist_ok=True)
        partial.replace(final)
    else:
        _make_folder(final.parent, state)
        _place_without_overwriting(file, partial, final, state)


def _make_folder(folder: Path, state: TaskState) -> None:
    """The folder of a file placed in a models folder (a model's own subfolder), told to `state` when made here:
    one that was there is not the job's to take back. The models folder itself holds the partials: it is there."""
    try:
        folder.mkdir()
    except FileExistsError:
        return
    state.record_made_folder()


def _place_without_overwriting(file: RemoteFile, partial: Path, final: Path, state: TaskState) -> None:
    """Put a verified partial at `final` unless a file arrived there during the download (a pull of another repo's
    file of the same name, the user): that file is kept, and so is the partial, which a later pull takes once the
    name is free. A file placed here is told to `state`: only those are the job's to take back."""
    try:
        os.link(partial, final)  # never replaces: FileExistsError instead
    except FileExistsError:
        _check_existing(file, final, state)  # this same file, pulled by another job: fine
    except OSError:  # a file system without hard links (FAT): a check, then the move
        if final.exists():
            _check_existing(file, final, state)
        else:
            partial.replace(final)
            state.record_placed(file.filename)
            return
    else:
        state.record_placed(file.filename)
    partial.unlink()


def _expected_and_actual_hash(file: RemoteFile, partial: Path, state: TaskState) -> tuple[str, str]:
    # LFS files are named by their sha256; small files by their git blob sha1 ("blob <size>\0" + bytes).
    if file.sha256 is not None:
        digest = hashlib.sha256()
    else:
        digest = hashlib.sha1()
        digest.update(b"blob %d\0" % file.size)
    checked = 0
    state.verifying(file.filename, 0, file.size)
    with partial.open("rb") as source:
        while block := source.read(CHUNK_BYTES):
            digest.update(block)
            checked += len(block)
            state.verifying(file.filename, checked, file.size)
            state.check()
    return file.etag, digest.hexdigest()
