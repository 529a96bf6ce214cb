"""Remote endpoints: OpenAI-compatible servers elsewhere (vLLM on a cluster, another ModelDeck) that the gateway
serves like local models, each of their models under `NAME/<its id there>`.

A remote is a name, a base URL and an optional API key. Names and URLs are kept in `<config>/remotes.json` with the
models last seen there, so that a remote that is down at start is still listed (and answers 502); keys are kept in
the OS keyring, or where there is none in `<config>/remote-keys.json`, readable only by the user. The models are
listed again every REFRESH_S seconds.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

import aiohttp
import keyring
import keyring.errors

from app.bad_files import set_aside
from app.bounded_json import load_json
from app.hub.library import ModelSpec
from app.keys import insecure_keyring_reason
from app.paths import AppPaths
from engines.atomic_files import write_atomically

log = logging.getLogger("modeldeck.remotes")

NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
KEYRING_SERVICE = "modeldeck-remote"
LIST_TIMEOUT_S = 10.0
MAX_LIST_BYTES = 4 * 1024 * 1024  # a remote's /v1/models answer
MAX_REMOTE_MODELS = 1000
REFRESH_S = 30.0
KEY_ENV_PREFIX = "MODELDECK_REMOTE_KEY_"


@dataclass(frozen=True)
class RemoteEndpoint:
    """An OpenAI-compatible server elsewhere whose models are served as `name/<model>`."""

    name: str
    url: str  # base URL, without /v1
    api_key: str | None
    models: tuple[str, ...]  # their ids at the remote


@dataclass(frozen=True)
class RemoteModel:
    """One model served by a remote: the remote, and the model's id there (`MODEL` of `NAME/MODEL`)."""

    endpoint: RemoteEndpoint
    upstream_id: str


class RemoteTable:
    """The remotes the service serves now, and which of them serves each model id (in-memory lookups)."""

    def __init__(self) -> None:
        self._remotes: dict[str, RemoteEndpoint] = {}
        self._models: dict[str, RemoteModel] = {}

    def add(self, remote: RemoteEndpoint, model_ids: tuple[str, ...]) -> None:
        """Serve `remote`'s models as `model_ids` (in the order of `remote.models`), replacing what it had."""
        self.remove(remote.name)
        self._remotes[remote.name] = remote
        for model_id, upstream in zip(model_ids, remote.models, strict=True):
            self._models[model_id] = RemoteModel(remote, upstream)

    def remove(self, name: str) -> list[str]:
        """Stop serving the remote `name`; the model ids it served."""
        self._remotes.pop(name, None)
        gone = [model_id for model_id, found in self._models.items() if found.endpoint.name == name]
        for model_id in gone:
            del self._models[model_id]
        return gone

    def model(self, model_id: str) -> RemoteModel | None:
        return self._models.get(model_id)

    def values(self) -> list[RemoteEndpoint]:
        return list(self._remotes.values())


class RemoteError(ValueError):
    """A remote cannot be added: a bad name or URL. The message says which."""


class RemoteUnavailable(RemoteError):
    """The remote did not list its models: down, refused the key, or not an OpenAI-compatible server."""


def checked_name(name: str) -> str:
    if not isinstance(name, str) or not NAME.match(name):
        raise RemoteError(
            f"remote name {name!r}: use 1 to 63 lower-case letters, digits, '.', '_' or '-', starting with a letter "
            "or digit"
        )
    return name


def checked_url(url: str) -> str:
    """The base URL, without a trailing `/` or `/v1`: http or https, a host, no credentials, query or fragment."""
    parts = urlsplit(url.strip()) if isinstance(url, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise RemoteError(f"remote URL {url!r}: expected http(s)://HOST[:PORT][/PATH]")
    if parts.username or parts.password or parts.query or parts.fragment:
        raise RemoteError(f"remote URL {url!r}: no credentials, query or fragment (the key is given on its own)")
    path = parts.path.rstrip("/").removesuffix("/v1")
    return f"{parts.scheme}://{parts.netloc}{path}"


def key_env_name(name: str) -> str:
    """The environment variable that may hold a remote's key: MODELDECK_REMOTE_KEY_<NAME>, '.' and '-' as '_'."""
    return KEY_ENV_PREFIX + re.sub(r"[^A-Z0-9]", "_", name.upper())


class RemoteKeys:
    """Remote API keys: in the OS keyring, else in a JSON file readable only by the user."""

    def __init__(self, paths: AppPaths) -> None:
        self._file = paths.config / "remote-keys.json"
        self._prefix = f"{paths.config}:"  # every MODELDECK_HOME keeps its own keys
        self._use_file = insecure_keyring_reason() is not None

    def _read_file(self) -> dict[str, str]:
        """The stored keys; a file that is not a JSON object of them is set aside first (a save must not write
        over the keys it holds)."""
        try:
            data = load_json(self._file.read_bytes())
            if not isinstance(data, dict):
                raise ValueError("it must hold a JSON object")
        except FileNotFoundError:
            return {}
        except OSError as exc:
            log.error("cannot read %s: %s", self._file, exc.strerror or exc)
            return {}
        except ValueError as exc:  # BadJson: not UTF-8, not JSON, or nested past its bound
            log.error("%s is not valid (%s); kept it as %s", self._file, exc, set_aside(self._file).name)
            return {}
        return {str(k): str(v) for k, v in data.items()}

    def get(self, name: str) -> str | None:
        from_env = os.environ.get(key_env_name(name), "").strip()
        if from_env:
            return from_env
        if not self._use_file:
            try:
                return keyring.get_password(KEYRING_SERVICE, self._prefix + name)
            except keyring.errors.KeyringError:
                self._use_file = True
        return self._read_file().get(name)

    def set(self, name: str, key: str | None) -> None:
        if not key:
            self.delete(name)
            return
        if not self._use_file:
            try:
                keyring.set_password(KEYRING_SERVICE, self._prefix + name, key)
                return
            except keyring.errors.KeyringError:
                self._use_file = True
        write_atomically(self._file, json.dumps({**self._read_file(), name: key}))

    def delete(self, name: str) -> None:
        if not self._use_file:
            try:
                keyring.delete_password(KEYRING_SERVICE, self._prefix + name)
            except keyring.errors.PasswordDeleteError:
                pass  # there was none
            except keyring.errors.KeyringError:
                self._use_file = True
        stored = self._read_file()
        if name in stored:
            del stored[name]
            write_atomically(self._file, json.dumps(stored))


@dataclass(frozen=True)
class SavedRemote:
    name: str
    url: str
    models: tuple[str, ...] = ()  # their ids at the remote, when last listed


async def read_bounded(response: aiohttp.ClientResponse, limit: int) -> bytes | None:
    """The body of a remote's answer, or None when it is over `limit` bytes (read no further than that)."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.content.iter_chunked(64 * 1024):
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


async def list_models(session: aiohttp.ClientSession, url: str, key: str | None) -> tuple[str, ...]:
    """The model ids a remote lists at /v1/models. Raises RemoteUnavailable with the reason."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        async with session.get(
            url + "/v1/models", headers=headers, timeout=aiohttp.ClientTimeout(total=LIST_TIMEOUT_S)
        ) as response:
            if response.status in (401, 403):
                raise RemoteUnavailable(f"{url} refused the API key (HTTP {response.status})")
            if response.status != 200:
                raise RemoteUnavailable(f"{url}/v1/models answered HTTP {response.status}")
            raw = await read_bounded(response, MAX_LIST_BYTES)
            if raw is None:
                raise RemoteUnavailable(f"{url}/v1/models answered more than {MAX_LIST_BYTES} bytes")
            data = load_json(raw)
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        if isinstance(exc, RemoteUnavailable):
            raise
        raise RemoteUnavailable(f"{url} did not answer /v1/models: {exc.__class__.__name__} {exc}".strip()) from exc
    try:
        ids = tuple(str(item["id"]) for item in data["data"])
    except (KeyError, TypeError) as exc:
        raise RemoteUnavailable(f"{url}/v1/models is not an OpenAI model list") from exc
    if len(ids) > MAX_REMOTE_MODELS:
        raise RemoteUnavailable(f"{url}/v1/models lists {len(ids)} models, more than {MAX_REMOTE_MODELS}")
    return tuple(dict.fromkeys(ids))


class RemoteHost(Protocol):
    """What the registry needs of the service's engine manager: the models it serves, and a place to list a remote's."""

    @property
    def models(self) -> Mapping[str, ModelSpec]: ...

    def remote_of(self, model_id: str) -> RemoteModel | None: ...

    def add_remote(self, remote: RemoteEndpoint, specs: dict[str, ModelSpec]) -> None: ...

    def remove_remote(self, name: str) -> None: ...


class RemoteRegistry:
    """The remotes of the service: added from the command line or the control API, listed into the manager."""

    def __init__(self, manager: RemoteHost, paths: AppPaths, session: aiohttp.ClientSession) -> None:
        self._manager = manager
        self._session = session
        self._file: Path = paths.config / "remotes.json"
        self.keys = RemoteKeys(paths)
        self._saved: dict[str, SavedRemote] = {}

    def _load_saved(self) -> dict[str, SavedRemote]:
        try:
            data = load_json(self._file.read_bytes())
            return {r["name"]: SavedRemote(checked_name(r["name"]), checked_url(r["url"]), tuple(r["models"]))
                    for r in data}  # fmt: skip
        except FileNotFoundError:
            return {}
        except OSError as exc:
            log.error("cannot read %s (%s): starting without its remotes", self._file, exc.strerror or exc)
            return {}
        except (ValueError, KeyError, TypeError) as exc:
            log.error("%s is not valid (%s); kept it as %s", self._file, exc, set_aside(self._file).name)
            return {}

    def _save(self) -> None:
        write_atomically(self._file, json.dumps([asdict(r) for r in self._saved.values()], indent=2))

    async def start(self, from_command_line: tuple[tuple[str, str], ...]) -> None:
        """Register the saved remotes and those given with --remote; one that does not answer keeps the models
        it listed last time, and is listed again by `refresh_forever`."""
        self._saved = self._load_saved()
        for name, url in from_command_line:
            known = self._saved.get(name)
            self._saved[name] = SavedRemote(name, url, known.models if known and known.url == url else ())
        remotes = list(self._saved.values())
        # All at once: a remote that does not answer holds the start up by one timeout, not one each.
        results = await asyncio.gather(*(self._list(remote) for remote in remotes), return_exceptions=True)
        for remote, result in zip(remotes, results, strict=True):
            if isinstance(result, RemoteError):
                log.warning("remote %s: %s; serving the %d model(s) it listed before", remote.name, result,
                            len(remote.models))  # fmt: skip
                self._register(remote)
            elif isinstance(result, BaseException):
                raise result
        self._save()

    async def add(self, name: str, url: str, key: str | None) -> SavedRemote:
        """Add (or replace) a remote; it must list its models now. Raises RemoteError, changing nothing."""
        name, url = checked_name(name), checked_url(url)
        clash = [m for m in self._manager.models if m.startswith(name + "/") and self._manager.remote_of(m) is None]
        if clash:
            raise RemoteError(f"remote name {name!r} would shadow the model {clash[0]!r}")
        models = await list_models(self._session, url, key)
        self.keys.set(name, key)
        remote = self._saved[name] = SavedRemote(name, url, models)
        self._register(remote)
        self._save()
        return remote

    def remove(self, name: str) -> bool:
        if self._saved.pop(name, None) is None:
            return False
        self._manager.remove_remote(name)
        self.keys.delete(name)
        self._save()
        return True

    def describe(self) -> list[dict[str, Any]]:
        return [{"name": r.name, "url": r.url, "models": [f"{r.name}/{m}" for m in r.models],
                 "has_key": self.keys.get(r.name) is not None} for r in self._saved.values()]  # fmt: skip

    async def refresh_forever(self) -> None:
        while True:
            await asyncio.sleep(REFRESH_S)
            for remote in list(self._saved.values()):
                try:
                    await self._list(remote)
                except RemoteError as exc:
                    log.debug("remote %s: %s", remote.name, exc)
            self._save()

    async def _list(self, remote: SavedRemote) -> None:
        models = await list_models(self._session, remote.url, self.keys.get(remote.name))
        if remote.name in self._saved:  # not removed meanwhile
            self._saved[remote.name] = SavedRemote(remote.name, remote.url, models)
            self._register(self._saved[remote.name])

    def _register(self, remote: SavedRemote) -> None:
        endpoint = RemoteEndpoint(remote.name, remote.url, self.keys.get(remote.name), remote.models)
        specs = {
            f"{remote.name}/{model}": ModelSpec(
                f"{remote.name}/{model}",
                f"{model} at {remote.url}",
                None,
                0,
                "remote",
                engine="external",
                url=remote.url,
            )
            for model in remote.models
        }
        self._manager.add_remote(endpoint, specs)
