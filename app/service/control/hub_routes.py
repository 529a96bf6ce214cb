"""Control-API routes for the Hub and the library: search, model pages, downloads, verify, delete and import.

Hub calls and disk work block, so they run on threads; the Hugging Face token is read from the keyring there too
(with the timeout app.hub.token gives it) and never leaves the service.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from app.api_types import DownloadRecord
from app.hub.cache import UnsafeName, check_repo_id
from app.hub.errors import DEFAULT_ENDPOINT, HubError, OfflineError
from app.hub.hub_api import ModelDetails, Sort, model_details, search_models
from app.hub.library import ModelSpec, pulled_spec
from app.hub.pull import PullRequest, all_variants, choose_variant
from app.hub.pulled import PulledModel
from app.hub.remote_header import HeaderCache, read_remote_header
from app.hub.token import read_token
from app.paths import AppPaths
from app.planner.facts import facts_from_gguf
from app.quality.expected import quality_lookup
from app.service.control.advisor import Advisor
from app.service.control.library_ops import (
    LibraryError,
    delete_files,
    describe_library,
    import_gguf,
    pulled_by_id,
    verify,
)
from app.service.control.recommend_variant import (
    VariantPick,
    header_file,
    pick_from_plan,
    plan_variants,
    recommend_variant,
)
from app.service.engines import EngineManager
from app.service.events import EventBus
from app.service.http.api import MAX_BODY, ApiError, Query, query_text, query_whole, read_json_object
from app.service.http.asgi import Receive, Send, send_error, send_json, wait_disconnect
from app.service.http.routes import RoutePattern
from app.service.jobs.downloads import DownloadConflict, Downloads, sentence
from app.task import Stopped, TaskState
from engines.gguf import GGUFError, GGUFInfo
from engines.states import ACTIVE_STATES

T = TypeVar("T")

SORTS: tuple[Sort, ...] = ("downloads", "likes", "recent")
MAX_LIMIT = 100


def hub_endpoint() -> str:
    """$HF_ENDPOINT (the variable huggingface_hub users know), else the Hub itself."""
    return os.environ.get("HF_ENDPOINT", "").rstrip("/") or DEFAULT_ENDPOINT


def _hub_token() -> str | None:
    return read_token().value


class HubRoutes:
    """Answers /api/hub/*, /api/downloads* and /api/library*; `handle` returns False for any other route."""

    routes: tuple[RoutePattern, ...] = (
        ("GET", "/api/hub/search"), ("GET", "/api/hub/models/{...}"),
        ("GET", "/api/downloads"), ("POST", "/api/downloads"),
        *(("POST", f"/api/downloads/{{}}/{action}") for action in ("pause", "resume", "cancel")),
        ("GET", "/api/library"), ("POST", "/api/library/import"), ("POST", "/api/library/{}/verify"),
        ("DELETE", "/api/library/{}"),
    )  # fmt: skip

    def __init__(
        self,
        manager: EngineManager,
        bus: EventBus,
        advisor: Advisor,
        paths: AppPaths,
        cache_dir: Path,
        endpoint: str,
        models_dir: Path | None = None,  # where downloads go as plain files; None: the Hugging Face cache
    ) -> None:
        self._manager = manager
        self._bus = bus
        self._advisor = advisor
        self._paths = paths
        self._cache_dir = cache_dir
        self._endpoint = endpoint
        self._models_dir = models_dir
        self.downloads = Downloads(bus, paths, cache_dir, endpoint, self.add_pulled, models_dir)
        self._lock = asyncio.Lock()  # one library change at a time: delete and import touch the same registry
        self._headers = HeaderCache()

    async def handle(self, method: str, parts: list[str], query: Query, receive: Receive, send: Send) -> bool:
        try:
            return await self._route(method, parts, query, receive, send)
        except (HubError, UnsafeName) as exc:
            await _send_hub_error(send, exc)
        except DownloadConflict as exc:
            await send_error(send, 409, str(exc), "invalid_request_error", "conflict")
        except LibraryError as exc:
            await send_error(send, exc.status, str(exc), "invalid_request_error")
        return True

    async def _route(self, method: str, parts: list[str], query: Query, receive: Receive, send: Send) -> bool:
        match method, parts:
            case "GET", ["api", "hub", "search"]:
                await send_json(send, 200, await self._search(query))
            case "GET", ["api", "hub", "models", *repo] if repo:
                await send_json(send, 200, await self._model_page("/".join(repo)))
            case "GET", ["api", "downloads"]:
                await send_json(send, 200, [job.to_dict() for job in self.downloads.jobs()])
            case "POST", ["api", "downloads"]:
                await send_json(send, 202, await self._start_download(await _json_body(receive)))
            case "POST", ["api", "downloads", job_id, action] if action in ("pause", "resume", "cancel"):
                await send_json(send, 200, await self._control_download(job_id, action))
            case "GET", ["api", "library"]:
                await send_json(send, 200, await self._library())
            case "POST", ["api", "library", "import"]:
                imported = await self._import(await _json_body(receive), receive)
                if imported is not None:
                    await send_json(send, 201, imported)
            case "POST", ["api", "library", model_id, "verify"]:
                spec = self._spec(model_id)
                verdict = await asyncio.to_thread(lambda: verify(spec, pulled_by_id(self._paths).get(model_id)))
                await send_json(send, 200, verdict.to_dict())
            case "DELETE", ["api", "library", model_id]:
                await self._delete(self._spec(model_id))
                await send_json(send, 200, {"deleted": model_id})
            case _:
                return False
        return True

    async def _search(self, query: Query) -> list[dict[str, Any]]:
        sort, library = query_text(query, "sort", "downloads"), query_text(query, "format", "gguf")
        if library not in ("gguf", "safetensors"):
            raise ApiError(400, "`format` must be gguf or safetensors.")
        if sort not in SORTS:
            raise ApiError(400, f"`sort` must be one of {', '.join(SORTS)}.")
        limit = query_whole(query, "limit", 20, 1, MAX_LIMIT, f"`limit` must be a whole number from 1 to {MAX_LIMIT}.")
        order = next(s for s in SORTS if s == sort)
        text, token = query_text(query, "q"), await asyncio.to_thread(_hub_token)
        found = await asyncio.to_thread(
            search_models, text, endpoint=self._endpoint, token=token, sort=order, limit=limit, library=library
        )
        return [{
            "id": m.id, "downloads": m.downloads, "likes": m.likes, "gated": m.gated, "pipeline_tag": m.pipeline_tag,
            "last_modified": m.last_modified.isoformat() if m.last_modified else None,
        } for m in found]  # fmt: skip

    async def _details(self, repo_id: str) -> ModelDetails:
        check_repo_id(repo_id)
        token = await asyncio.to_thread(_hub_token)
        return await asyncio.to_thread(model_details, repo_id, endpoint=self._endpoint, token=token)

    async def _model_page(self, repo_id: str) -> dict[str, Any]:
        details = await self._details(repo_id)
        pick = await self._suggest(details)
        expected, _ = await asyncio.to_thread(quality_lookup, self._paths)
        return {
            "id": details.id, "commit": details.commit, "gated": details.gated, "license": details.license,
            "page_url": f"{self._endpoint}/{details.id}",
            "files": [{"path": f.path, "size": f.size, "sha256": f.sha256} for f in details.files],
            "variants": [{
                "name": v.name, "quant": v.quant, "size": v.size, "complete": v.complete,
                "files": [f.path for f in v.files], "fit": pick.fits.get(v.name),
                "quality_loss": expected(v.files[0].path, v.quant) if v.files else None,
            } for v in all_variants(details)],
            "recommended": pick.variant, "recommendation_basis": pick.basis,
            "recommendation": {"source": pick.source, "plan": pick.plan},
        }  # fmt: skip

    async def _suggest(self, details: ModelDetails) -> VariantPick:
        """The planner's pick from one header read remotely; the size-based pick, labelled, when none is readable."""
        variants = list(details.variants)
        source = header_file(variants)
        if source is None:
            return recommend_variant(variants, await self._advisor.hardware())
        try:
            info = await asyncio.to_thread(self._header, details, source.path)
        except (HubError, UnsafeName, GGUFError) as exc:
            fallback = recommend_variant(variants, await self._advisor.hardware())
            return replace(fallback, basis=f"{fallback.basis} (no header could be read for the planner: {exc})")
        planned = plan_variants(details.id, variants, source, facts_from_gguf(info))
        if not planned:
            return recommend_variant(variants, await self._advisor.hardware())
        return pick_from_plan(await self._advisor.plan(details.id, planned))

    def _header(self, details: ModelDetails, filename: str) -> GGUFInfo:
        key = (details.id, details.commit or "main", filename)
        info = self._headers.get(key)
        if info is None:
            info = read_remote_header(details.id, filename, endpoint=self._endpoint, token=_hub_token())
            self._headers.put(key, info)
        return info

    async def _start_download(self, body: dict[str, Any]) -> DownloadRecord:
        _refuse_unknown_fields(body, ("repo", "variant", "file"))
        repo, variant, filename = body.get("repo"), body.get("variant"), body.get("file")
        if not isinstance(repo, str) or not isinstance(variant, str | None) or not isinstance(filename, str | None):
            raise ApiError(400, 'Send {"repo": "org/name"} with a "variant" or a "file".')
        text = repo + (f"/{filename}" if filename else "") + (f":{variant}" if variant else "")  # both: refused
        request = PullRequest.parse(text)
        # Fetching the page first answers a wrong name or a missing variant at once, not in a failed job later.
        chosen = choose_variant(request, await self._details(request.repo_id))
        job = self.downloads.start(request, chosen, await asyncio.to_thread(_hub_token))
        return job.to_dict()

    async def _control_download(self, job_id: str, action: str) -> DownloadRecord:
        if self.downloads.get(job_id) is None:
            raise LibraryError(404, f"No download {job_id!r}.")
        if action == "pause":
            job = self.downloads.pause(job_id)
        elif action == "resume":
            job = self.downloads.resume(job_id, await asyncio.to_thread(_hub_token))
        else:
            job = await self.downloads.cancel(job_id)
        return job.to_dict()

    async def _library(self) -> dict[str, Any]:
        library: dict[str, Any] = await asyncio.to_thread(
            describe_library, dict(self._manager.models), self._paths, self._cache_dir, self._models_dir
        )
        for entry in library["models"]:
            entry["state"] = self._manager.state(entry["id"]).value
        return library

    async def _delete(self, spec: ModelSpec) -> None:
        if spec.source not in ("hub", "local"):
            raise LibraryError(403, f"{spec.name} is {spec.source}, not downloaded or imported: it cannot be deleted.")
        async with self._lock:
            if self._manager.state(spec.id) in ACTIVE_STATES:
                raise LibraryError(409, f"{spec.id} is running: stop it, then delete it.")
            await asyncio.to_thread(delete_files, spec, self._paths)
            self._manager.models.pop(spec.id, None)
        self.publish_models()

    async def _import(self, body: dict[str, Any], receive: Receive) -> dict[str, Any] | None:
        """The imported model's record; None when the client went away first (Ctrl-C in `modeldeck import`) and
        the copy was stopped and removed."""
        _refuse_unknown_fields(body, ("path", "link"))
        path = body.get("path")
        if not isinstance(path, str) or not path:
            raise ApiError(400, 'Send {"path": "/full/path/to/MODEL.gguf"}.')
        async with self._lock:
            link, taken = body.get("link") is True, set(self._manager.models)
            try:
                spec = await _while_connected(
                    lambda state: import_gguf(Path(path), self._paths, taken, link, state), receive
                )
            except Stopped:
                return None
            self._manager.models[spec.id] = spec
        self.publish_models()
        return {"id": spec.id, "name": spec.name, "path": str(spec.path), "size_on_disk": spec.size_bytes}

    def add_pulled(self, model: PulledModel) -> None:
        """Serve a model a download just finished, without a restart."""
        spec = pulled_spec(model)
        self._manager.models[spec.id] = spec
        self.publish_models()

    def publish_models(self) -> None:
        """A fresh snapshot for live clients: the set of models changed."""
        self._bus.publish({"type": "snapshot", "models": [self._manager.describe(m) for m in self._manager.models]})

    def _spec(self, model_id: str) -> ModelSpec:
        spec = self._manager.models.get(model_id)
        if spec is None:
            raise LibraryError(404, f"No model {model_id!r} in the library.")
        return spec


async def _while_connected(work: Callable[[TaskState], T], receive: Receive) -> T:
    """`work` on a thread, cancelled through its TaskState when the client disconnects or this task is cancelled
    (the service stopping). The thread is waited for either way, so that what it cleans up is gone on return."""
    state = TaskState()
    job = asyncio.ensure_future(asyncio.to_thread(work, state))
    gone = asyncio.ensure_future(wait_disconnect(receive))
    try:
        await asyncio.wait({job, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not job.done():
            state.cancel()
            await asyncio.wait({job})
    return job.result()


def _refuse_unknown_fields(body: dict[str, Any], known: tuple[str, ...]) -> None:
    """A 400 naming the fields of `body` the route does not read, as the other routes answer: a misspelt "link"
    or an unsupported "revision" would otherwise be dropped without a word."""
    unknown = [name for name in body if name not in known]
    if unknown:
        names = ", ".join(repr(name) for name in sorted(unknown))
        plural = "s" if len(unknown) > 1 else ""
        raise ApiError(400, f"Unknown field{plural} {names}; known: {', '.join(known)}.", param=min(unknown))


async def _json_body(receive: Receive) -> dict[str, Any]:
    # The Hub routes have answered a body over the limit with 400 since they were written, the others with 413.
    return await read_json_object(receive, MAX_BODY, too_large_status=400)


OFFLINE_RETRY_S = b"30"  # Retry-After of the Hub unreachable
# HubError.kind -> HTTP status and error type of the control API's answer
_HUB_ERROR_STATUS = {
    "gated": (403, "hub_error"),
    "not_found": (404, "hub_error"),
    "rate_limited": (429, "hub_error"),
    "variant_required": (400, "invalid_request_error"),
    "bad_name": (400, "invalid_request_error"),  # as an UnsafeName
}


async def _send_hub_error(send: Send, exc: Exception) -> None:
    message = sentence(str(exc)) or "The Hub request failed."
    if isinstance(exc, OfflineError):  # for a while, as a rule: worth trying again
        await send_error(send, 503, message, "hub_error", "offline", headers=[(b"retry-after", OFFLINE_RETRY_S)])
    elif isinstance(exc, UnsafeName):
        await send_error(send, 400, message, "invalid_request_error", "bad_name")
    elif isinstance(exc, HubError) and exc.kind in _HUB_ERROR_STATUS:
        status, error_type = _HUB_ERROR_STATUS[exc.kind]
        await send_error(send, status, message, error_type, exc.kind)
    else:
        await send_error(send, 502, message, "hub_error")
