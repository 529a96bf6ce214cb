"""A local stand-in for the Hugging Face Hub, which cannot be reached from the test machines.

It speaks the subset of the Hub's HTTP protocol that huggingface_hub and ModelDeck's downloader use: model search
(`/api/models`), model info (`/api/models/{repo}` and `.../revision/{rev}`), the file tree
(`/api/models/{repo}/tree/{rev}`) and file downloads (`/{repo}/resolve/{rev}/{file}`) with the Hub's headers
(ETag, X-Repo-Commit, X-Linked-Size, X-Linked-Etag, Content-Length). As on the Hub, a large (LFS) file is answered
with a 302 to a "CDN" on another origin (`localhost` instead of `127.0.0.1`, so clients must drop the token), which
serves the bytes with Range requests answered by 206. Errors carry the
error headers (X-Error-Code) huggingface_hub turns into typed errors. Faults are switchable per test: drop the
connection or stall after N bytes, answer 429 with Retry-After, ignore Range, serve a corrupted byte. Every request
is logged with its Range and whether it carried the expected token.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit


@dataclass
class HubRepo:
    """One model repository: files by path, and what its info page says."""

    repo_id: str
    files: dict[str, bytes]
    commit: str = "c0ffee" + "0" * 34
    gated: str | bool = False
    license: str = "apache-2.0"
    downloads: int = 0
    likes: int = 0
    last_modified: str = "2026-01-01T00:00:00.000Z"
    tags: tuple[str, ...] = ("gguf", "text-generation")


@dataclass
class Faults:
    """Switchable misbehaviour. Counters (`*_times`) run down with each affected download request."""

    drop_after: int | None = None  # close the connection after this many body bytes
    drop_times: int = 1
    stall_after: int | None = None  # send this many body bytes, then hang until the server stops
    too_many_times: int = 0  # answer 429 with Retry-After this many times
    retry_after_s: int = 1
    ignore_range: bool = False
    corrupt_offset: int | None = None  # flip one byte at this offset of every file served
    token: str | None = None  # gated repos accept only this bearer token
    before_last_chunk: Callable[[str], None] | None = None  # called with the file's name before its last bytes go


@dataclass
class LoggedRequest:
    method: str
    path: str
    range: str | None
    authorized: bool  # carried `Authorization: Bearer <faults.token>`
    authorization: str | None
    status: int = 0  # filled in when the answer is sent


def is_lfs(content: bytes) -> bool:
    return len(content) >= 1024  # small files are plain git blobs on the Hub, large ones LFS


def sha256_of(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


def git_blob_sha1(content: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


class FakeHub:
    """The server, run in a thread of the test process on 127.0.0.1 and a free port."""

    def __init__(self, repos: list[HubRepo] | None = None) -> None:
        self.repos = {repo.repo_id: repo for repo in repos or []}
        self.faults = Faults()
        self.log: list[LoggedRequest] = []
        self.sent: dict[str, int] = {}  # body bytes of each file written to clients, by file name
        self._sent_lock = threading.Lock()
        self._stop = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-hub", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> FakeHub:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def requests_for(self, filename: str) -> list[LoggedRequest]:
        """Every GET of the file: at `resolve` (redirects, refusals) and at the CDN."""
        return [entry for entry in self.log if entry.method == "GET" and entry.path.endswith("/" + filename)]

    def downloads(self, filename: str) -> list[LoggedRequest]:
        """The GETs of the file that were answered with its bytes (200 or 206)."""
        return [entry for entry in self.requests_for(filename) if entry.status in (200, 206)]

    def bytes_sent(self, filename: str) -> int:
        """Bytes of the file's body the server wrote to clients, over every request so far."""
        with self._sent_lock:
            return self.sent.get(filename, 0)

    def count_sent(self, filename: str, nbytes: int) -> None:
        with self._sent_lock:
            self.sent[filename] = self.sent.get(filename, 0) + nbytes

    def stalled(self) -> bool:
        return self._stop.wait(0.05)


@contextmanager
def running_hub(repos: list[HubRepo]) -> Iterator[FakeHub]:
    hub = FakeHub(repos).start()
    try:
        yield hub
    finally:
        hub.stop()


def _handler(hub: FakeHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        _entry: LoggedRequest | None = None

        def log_message(self, format: str, *args: Any) -> None:
            pass  # the test reads hub.log instead of stderr noise

        def handle(self) -> None:
            try:
                super().handle()
            except (ConnectionResetError, BrokenPipeError):
                self.close_connection = True  # a client that pauses, cancels or is killed hangs up mid-answer

        def do_HEAD(self) -> None:
            self._route(body=False)

        def do_GET(self) -> None:
            self._route(body=True)

        def _route(self, body: bool) -> None:
            url = urlsplit(self.path)
            path = unquote(url.path)
            auth = self.headers.get("Authorization")
            expected = f"Bearer {hub.faults.token}" if hub.faults.token else None
            self._entry = LoggedRequest(self.command, path, self.headers.get("Range"), auth == expected, auth)
            hub.log.append(self._entry)
            query = parse_qs(url.query)
            if path.startswith("/cdn/"):
                self._cdn(path.removeprefix("/cdn/"), body)
            elif path == "/api/models":
                self._search(query)
            elif path.startswith("/api/models/"):
                self._api(path.removeprefix("/api/models/"), auth == expected)
            elif "/resolve/" in path:
                self._resolve(path.lstrip("/"), body, auth == expected)
            else:
                self._error(404, "EntryNotFound", "no such route")

        def send_response(self, code: int, message: str | None = None) -> None:
            if self._entry is not None:
                self._entry.status = code
            super().send_response(code, message)

        def _json(self, data: object) -> None:
            raw = json.dumps(data).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def _error(self, status: int, code: str | None, message: str, extra: dict[str, str] | None = None) -> None:
            raw = json.dumps({"error": message}).encode()
            self.send_response(status)
            if code:
                self.send_header("X-Error-Code", code)
            self.send_header("X-Error-Message", message)
            for name, value in (extra or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(raw)

        def _search(self, query: dict[str, list[str]]) -> None:
            words = query.get("search", [""])[0].lower()
            filters = set(query.get("filter", []))
            found = [repo for repo in hub.repos.values() if words in repo.repo_id.lower() and filters <= set(repo.tags)]
            key = query.get("sort", ["downloads"])[0]
            found.sort(
                key=lambda r: {"downloads": r.downloads, "likes": r.likes}.get(key, r.last_modified), reverse=True
            )
            limit = int(query.get("limit", ["1000"])[0])
            self._json([_summary(repo) for repo in found[:limit]])

        def _find(self, rest: str) -> tuple[HubRepo | None, str]:
            parts = rest.split("/")
            return hub.repos.get("/".join(parts[:2])), "/".join(parts[2:])

        def _api(self, rest: str, authorized: bool) -> None:
            repo, tail = self._find(rest)
            if repo is None:
                self._error(404, "RepoNotFound", "Repository not found")
            elif tail in ("", "revision/main"):
                info = _summary(repo) | {"sha": repo.commit, "cardData": {"license": repo.license}}
                info["siblings"] = [
                    {"rfilename": name, "size": len(data), "blobId": git_blob_sha1(data)}
                    | (
                        {"lfs": {"size": len(data), "sha256": sha256_of(data), "pointerSize": 134}}
                        if is_lfs(data)
                        else {}
                    )
                    for name, data in sorted(repo.files.items())
                ]
                self._json(info)
            elif tail == "tree/main":
                self._json([_tree_entry(name, data) for name, data in sorted(repo.files.items())])
            else:
                self._error(404, "RevisionNotFound", "Revision not found")

        def _resolve(self, rest: str, body: bool, authorized: bool) -> None:
            repo, tail = self._find(rest)
            revision, _, filename = tail.removeprefix("resolve/").partition("/")
            if repo is None:
                self._error(401, "RepoNotFound", "Invalid username or password.")
                return
            if repo.gated and not authorized:
                message = f"Access to model {repo.repo_id} is restricted. You must have access to it."
                self._error(403 if self.headers.get("Authorization") else 401, "GatedRepo", message)
                return
            if revision != "main" or filename not in repo.files:
                self._error(404, "EntryNotFound", "Entry not found")
                return
            if body and hub.faults.too_many_times > 0:
                hub.faults.too_many_times -= 1
                self._error(429, None, "Too many requests", {"Retry-After": str(hub.faults.retry_after_s)})
                return
            content = repo.files[filename]
            if is_lfs(content):
                self._redirect_to_cdn(repo, filename, content)
            else:
                self._send_file(repo, filename, content, body)

        def _redirect_to_cdn(self, repo: HubRepo, filename: str, content: bytes) -> None:
            port = hub._server.server_address[1]
            self.send_response(302)
            self.send_header("Location", f"http://localhost:{port}/cdn/{repo.repo_id}/{sha256_of(content)}/{filename}")
            self.send_header("ETag", f'"{git_blob_sha1(content)}"')
            self.send_header("X-Linked-Etag", f'"{sha256_of(content)}"')
            self.send_header("X-Linked-Size", str(len(content)))
            self.send_header("X-Repo-Commit", repo.commit)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def _cdn(self, rest: str, body: bool) -> None:
            repo, tail = self._find(rest)
            _, _, filename = tail.partition("/")
            if repo is None or filename not in repo.files:
                self._error(404, None, "no such object")
                return
            self._send_file(repo, filename, repo.files[filename], body)

        def _send_file(self, repo: HubRepo, filename: str, content: bytes, body: bool) -> None:
            start, end = _wanted_range(self.headers.get("Range"), len(content), hub.faults.ignore_range)
            if start >= len(content) and start > 0:
                self._error(416, None, "Range Not Satisfiable", {"Content-Range": f"bytes */{len(content)}"})
                return
            partial = start > 0 or end < len(content)
            self.send_response(206 if partial else 200)
            self.send_header("ETag", f'"{sha256_of(content) if is_lfs(content) else git_blob_sha1(content)}"')
            self.send_header("X-Repo-Commit", repo.commit)
            self.send_header("Accept-Ranges", "bytes")
            if partial:
                self.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(content)}")
            self.send_header("Content-Length", str(end - start))
            self.end_headers()
            if body:
                self._stream(content, start, end, filename)

        def _stream(self, content: bytes, start: int, end: int, filename: str) -> None:
            faults = hub.faults
            if faults.corrupt_offset is not None:
                content = bytearray(content)
                content[faults.corrupt_offset] ^= 0xFF
                content = bytes(content)
            limit = end - start
            drop = faults.drop_after is not None and faults.drop_times > 0
            if drop:
                faults.drop_times -= 1
                limit = min(limit, faults.drop_after or 0)
            stall = faults.stall_after is not None
            if stall:
                limit = min(limit, faults.stall_after or 0)
            sent = 0
            while sent < limit:
                chunk = content[start + sent : start + min(limit, sent + 65536)]
                if faults.before_last_chunk is not None and start + sent + len(chunk) == len(content):
                    faults.before_last_chunk(filename)
                self.wfile.write(chunk)
                sent += len(chunk)
                hub.count_sent(filename, len(chunk))
            self.wfile.flush()
            if stall:
                while not hub.stalled():
                    pass  # hold the connection open, as a dead network does, until the test kills the client
            if drop or stall:
                self.close_connection = True
                self.connection.shutdown(2)

    return Handler


def _wanted_range(header: str | None, size: int, ignore: bool) -> tuple[int, int]:
    """Start and end (exclusive) of `Range: bytes=A-` or `bytes=A-B`; the whole file for no Range or another form."""
    if ignore or not header or not header.startswith("bytes="):
        return 0, size
    first, _, last = header.removeprefix("bytes=").partition("-")
    if not first.isdigit() or not (last == "" or last.isdigit()):
        return 0, size
    return int(first), min(size, int(last) + 1) if last else size


def _summary(repo: HubRepo) -> dict[str, Any]:
    return {
        "id": repo.repo_id,
        "modelId": repo.repo_id,
        "downloads": repo.downloads,
        "likes": repo.likes,
        "lastModified": repo.last_modified,
        "gated": repo.gated,
        "private": False,
        "tags": [*repo.tags, f"license:{repo.license}"],
        "pipeline_tag": "text-generation",
        "library_name": "gguf",
    }


def _tree_entry(name: str, data: bytes) -> dict[str, Any]:
    entry: dict[str, Any] = {"type": "file", "path": name, "size": len(data), "oid": git_blob_sha1(data)}
    if is_lfs(data):
        entry["lfs"] = {"oid": sha256_of(data), "size": len(data), "pointerSize": 134}
    return entry


SLICE_BYTES = 3_000_000  # the first bytes of the bundled GGUF the Hub tests serve (tests/app/conftest.py)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def add_repo(hub: FakeHub, repo_id: str, files: dict[str, bytes], **info: Any) -> HubRepo:
    repo = HubRepo(repo_id, files, **info)
    hub.repos[repo_id] = repo
    return repo
