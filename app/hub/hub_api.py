"""Search the Hugging Face Hub and read a model's files, license and gated status.

Every call takes the endpoint and the token as arguments: tests point the endpoint at a local server, and the
token comes from the OS keyring (app.hub.token), never from huggingface_hub's token file (`token=False` when none).
"""

from __future__ import annotations

import socket
import urllib.parse
import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

import httpx2
from huggingface_hub import HfApi, set_client_factory
from huggingface_hub.hf_api import ModelSort_T
from huggingface_hub.hf_api import RepoFile as HubTreeFile
from huggingface_hub.utils._http import default_client_factory  # its hooks; public in name only as the default

from app.hub.errors import HUB_FAILURES, OfflineError, translate
from app.hub.variants import RepoFile, Variant, gguf_variants, safetensors_variant

Sort = Literal["downloads", "likes", "recent"]
PROBE_TIMEOUT_S = 3.0
ANSWER_TIMEOUT_S = 10.0  # the Hub answers in a second; a host that takes the connection and says nothing is down
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_HUB_SORT: dict[Sort, ModelSort_T] = {"downloads": "downloads", "likes": "likes", "recent": "last_modified"}


@dataclass(frozen=True)
class ModelSummary:
    """One search result."""

    id: str
    downloads: int | None
    likes: int | None
    last_modified: datetime | None
    gated: bool
    pipeline_tag: str | None


@dataclass(frozen=True)
class ModelDetails:
    """What a model page shows: license, gated status, every file with its size, and the GGUF variants."""

    id: str
    commit: str | None
    gated: bool
    license: str | None
    files: tuple[RepoFile, ...]
    variants: tuple[Variant, ...]  # GGUF
    safetensors: Variant | None = None  # the weights, config and tokenizer vLLM serves, when the repo has them


def _client_that_gives_up() -> httpx2.Client:
    """huggingface_hub's client, whose calls wait for an answer forever (each passes timeout=None, which a client's
    default cannot override): a hook gives every request a timeout of its own, so a silent Hub ends a search."""
    client = default_client_factory()
    client.event_hooks["request"].append(_with_timeout)
    return client


def _with_timeout(request: httpx2.Request) -> None:
    request.extensions["timeout"] = httpx2.Timeout(ANSWER_TIMEOUT_S, connect=PROBE_TIMEOUT_S).as_dict()


set_client_factory(_client_that_gives_up)


def _api(endpoint: str, token: str | None) -> HfApi:
    # token=False stops huggingface_hub from reading its own token file: the token is ours to give or withhold.
    return HfApi(endpoint=endpoint, token=token or False, library_name="modeldeck")


def ensure_reachable(endpoint: str, timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """Fail fast with the offline message when the Hub's host takes no connection.

    huggingface_hub retries connection errors with backoff for about 20 seconds before giving up; a person
    offline should hear so at once. With a proxy configured the proxy decides, so no probe is made.
    """
    if urllib.request.getproxies():
        return
    parts = urllib.parse.urlsplit(endpoint)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname or "", port), timeout=timeout_s):
            pass
    except OSError as exc:
        raise OfflineError(f"{parts.hostname}: {exc.strerror or exc}") from None


def search_models(
    query: str, *, endpoint: str, token: str | None, sort: Sort = "downloads", limit: int = 20, library: str = "gguf"
) -> list[ModelSummary]:
    """Text-generation models matching `query` with files for `library` (gguf, safetensors), best first."""
    ensure_reachable(endpoint)
    try:
        found = _api(endpoint, token).list_models(
            search=query or None, filter=[library], pipeline_tag="text-generation", sort=_HUB_SORT[sort], limit=limit
        )
        results = [
            ModelSummary(m.id, m.downloads, m.likes, m.last_modified, bool(m.gated), m.pipeline_tag) for m in found
        ]
    except HUB_FAILURES as exc:
        raise translate(exc, endpoint, query, token is not None) from exc
    # The Hub sorts already; sorting again keeps the order promised even from a mirror that does not.
    if sort == "recent":
        results.sort(key=lambda m: m.last_modified or _EPOCH, reverse=True)
    else:
        results.sort(key=lambda m: getattr(m, sort) or 0, reverse=True)
    return results


def model_details(repo_id: str, *, endpoint: str, token: str | None) -> ModelDetails:
    """A model's license, gated status, files (sizes and LFS sha256) and GGUF variants."""
    ensure_reachable(endpoint)
    api = _api(endpoint, token)
    try:
        info = api.model_info(repo_id)
        tree = [entry for entry in api.list_repo_tree(repo_id, recursive=True) if isinstance(entry, HubTreeFile)]
    except HUB_FAILURES as exc:
        raise translate(exc, endpoint, repo_id, token is not None) from exc
    files = tuple(RepoFile(f.path, f.size, f.lfs.sha256 if f.lfs else None) for f in tree)
    return ModelDetails(
        info.id,
        info.sha,
        bool(info.gated),
        _license(info.card_data, info.tags),
        files,
        tuple(gguf_variants(list(files))),
        safetensors_variant(list(files)),
    )


def _license(card_data: object, tags: list[str] | None) -> str | None:
    value = getattr(card_data, "license", None)
    if isinstance(value, str):
        return value
    return next((tag.removeprefix("license:") for tag in tags or [] if tag.startswith("license:")), None)
