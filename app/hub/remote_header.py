"""A Hub GGUF file's header, read with Range requests before anything is downloaded.

The planner needs a model's layers, heads and context to suggest a variant; they are in the first megabytes of the
file. The range grows while the bounded reader (engines.gguf) says the header runs past the bytes read, up to a hard
cap, so a hostile or huge vocabulary cannot make the service fetch a whole model. Tensor data bounds are checked
against the size the Hub gives (X-Linked-Size). Headers are kept per (repo, commit, file): a commit never changes.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import httpx

from app.hub.download import resolve
from app.hub.errors import HubError, for_status
from app.hub.remote_file import RemoteFile
from engines.gguf import GGUFError, GGUFInfo, GGUFPrefixTooShort, read_gguf_prefix

FIRST_BYTES = 2 * 1024 * 1024  # most headers fit; a large vocabulary needs one more request
MAX_HEADER_BYTES = 64 * 1024 * 1024
CACHED_HEADERS = 256
HeaderKey = tuple[str, str, str]  # repo, commit, file


def read_remote_header(
    repo_id: str,
    filename: str,
    *,
    endpoint: str,
    token: str | None,
    revision: str = "main",
    first_bytes: int = FIRST_BYTES,
    max_bytes: int = MAX_HEADER_BYTES,
) -> GGUFInfo:
    """The checked header of a GGUF file on the Hub. Raises HubError (network, access) or GGUFError (not usable)."""
    file = resolve(repo_id, filename, endpoint=endpoint, token=token, revision=revision)
    wanted = min(first_bytes, file.size, max_bytes)
    headers = {"Accept-Encoding": "identity", "User-Agent": "modeldeck"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    # Redirects go to the Hub's CDN; httpx drops the Authorization header when the host changes.
    with httpx.Client(headers=headers, timeout=httpx.Timeout(30.0, connect=10.0), follow_redirects=True) as client:
        while True:
            prefix = _fetch_prefix(client, file, wanted, endpoint)
            try:
                return read_gguf_prefix(prefix, file.size, f"{repo_id}/{filename}")
            except GGUFPrefixTooShort as short:
                if wanted >= max_bytes:
                    raise GGUFError(
                        f"{repo_id}/{filename}: the header is larger than {max_bytes:,} bytes; not read further"
                    ) from short
                wanted = min(max(2 * wanted, short.needed), max_bytes, file.size)


def _fetch_prefix(client: httpx.Client, file: RemoteFile, count: int, endpoint: str) -> bytes:
    """The first `count` bytes. A server that ignores Range sends the whole file: only `count` bytes are taken."""
    received = bytearray()
    try:
        with client.stream("GET", file.url, headers={"Range": f"bytes=0-{count - 1}"}) as response:
            if response.status_code not in (200, 206):
                raise for_status(
                    response.status_code, endpoint, file.repo_id, "Authorization" in client.headers,
                    response.headers.get("X-Error-Code"), response.headers.get("Retry-After"),
                )  # fmt: skip
            for chunk in response.iter_bytes():
                received += chunk
                if len(received) >= count:
                    break  # closing the stream hangs up on the rest
    except httpx.TransportError as exc:
        raise HubError(f"network error while reading the header of {file.filename}: {exc!r}") from exc
    return bytes(received[:count])


class HeaderCache:
    """Headers already read, per (repo, commit, file); the oldest go first. Safe to share between threads."""

    def __init__(self, capacity: int = CACHED_HEADERS) -> None:
        self._capacity = capacity
        self._headers: OrderedDict[HeaderKey, GGUFInfo] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: HeaderKey) -> GGUFInfo | None:
        with self._lock:
            info = self._headers.get(key)
            if info is not None:
                self._headers.move_to_end(key)
            return info

    def put(self, key: HeaderKey, info: GGUFInfo) -> None:
        with self._lock:
            self._headers[key] = info
            self._headers.move_to_end(key)
            while len(self._headers) > self._capacity:
                self._headers.popitem(last=False)
