"""Ollama's model listings (/api/tags, /api/show, /api/ps, /api/version) from what the engine manager knows and
what each GGUF file's header says.

Ollama names models `name:tag`; a ModelDeck id without a tag is listed as `id:latest`, and a request may name it
either way. Ollama's `digest` is the sha256 of a model's blob; hashing a file of gigabytes for a listing would cost
seconds, so here it is the sha256 of the model's id, size and modification time: it changes when the file does.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from app import __version__
from app.hub.library import ModelSpec
from app.service.engines import EngineManager
from engines.gguf import GGUFError, GGUFInfo, read_gguf_info

OLLAMA_API_VERSION = "0.12.6"  # the Ollama release whose API this dialect follows; clients gate features on it
_GGUF_ENGINES = frozenset({"llama-cpp-python", "llama-server"})
_FOREVER = "2318-01-01T00:00:00Z"  # what Ollama answers for a model kept loaded for good


def listed_name(model_id: str) -> str:
    return model_id if ":" in model_id else f"{model_id}:latest"


def _stat(spec: ModelSpec) -> tuple[int, int] | None:
    try:
        stat = spec.path.stat() if spec.path is not None else None
    except OSError:
        return None
    return (stat.st_size, stat.st_mtime_ns) if stat is not None else None


class HeaderCache:
    """The GGUF headers of the models' files, each read once per size and modification time."""

    def __init__(self) -> None:
        self._headers: dict[tuple[Path, int, int], GGUFInfo | None] = {}

    def header(self, spec: ModelSpec) -> GGUFInfo | None:
        """The header of a model's file (blocking); None where there is none to read."""
        stat = _stat(spec)
        if spec.path is None or stat is None or not spec.path.is_file():
            return None
        key = (spec.path, *stat)
        if key not in self._headers:
            try:
                self._headers[key] = read_gguf_info(spec.path)
            except GGUFError:
                self._headers[key] = None
        return self._headers[key]


def _parameter_size(info: GGUFInfo) -> str | None:
    label = info.metadata.get("general.size_label")
    if isinstance(label, str) and label:
        return label
    count = sum(info.tensor_elements.values())
    if not count:
        return None
    for scale, unit in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if count >= scale:
            return f"{count / scale:.1f}{unit}".replace(".0", "")
    return str(count)


def _details(spec: ModelSpec, info: GGUFInfo | None) -> dict[str, Any]:
    family = info.architecture if info else None
    return {
        "parent_model": "",
        "format": "gguf" if info is not None else ("safetensors" if spec.source == "folder" else ""),
        "family": family or "",
        "families": [family] if family else None,
        "parameter_size": (_parameter_size(info) if info else None) or "",
        "quantization_level": (info.quantization if info else None) or "",
    }


def _modified_at(spec: ModelSpec) -> str:
    stat = _stat(spec)
    moment = datetime.fromtimestamp(stat[1] / 1e9, UTC) if stat else datetime.fromtimestamp(0, UTC)
    return moment.isoformat().replace("+00:00", "Z")


def _digest(spec: ModelSpec) -> str:
    stat = _stat(spec) or (spec.size_bytes, 0)
    return hashlib.sha256(f"{spec.id}:{stat[0]}:{stat[1]}".encode()).hexdigest()


def _entry(spec: ModelSpec, info: GGUFInfo | None) -> dict[str, Any]:
    name = listed_name(spec.id)
    return {"name": name, "model": name, "modified_at": _modified_at(spec), "size": spec.size_bytes,
            "digest": _digest(spec), "details": _details(spec, info)}  # fmt: skip


async def tags(manager: EngineManager, cache: HeaderCache) -> dict[str, Any]:
    """GET /api/tags: every model the service knows."""
    specs = list(manager.models.values())
    headers = await asyncio.to_thread(lambda: [cache.header(spec) for spec in specs])
    return {"models": [_entry(spec, info) for spec, info in zip(specs, headers, strict=True)]}


def capabilities(manager: EngineManager, model_id: str, template: str | None) -> list[str]:
    """ "completion" always; "tools" when the chat template takes tools; "embedding" on the GGUF engines, which embed
    with any model (a remote's or an external server's is not known)."""
    found = ["completion"]
    if template is not None and "tools" in template:
        found.append("tools")
    here = manager.remote_of(model_id) is None and manager.models[model_id].url is None
    if here and manager.engine_name(model_id) in _GGUF_ENGINES:
        found.append("embedding")
    return found


async def show(manager: EngineManager, cache: HeaderCache, model_id: str) -> dict[str, Any]:
    """POST /api/show: the model's details, its header's facts as model_info, its chat template."""
    spec = manager.models[model_id]
    info = await asyncio.to_thread(cache.header, spec)
    model_info: dict[str, Any] = {}
    template = manager.chat_template(model_id)
    if info is not None:
        model_info = {key: value for key, value in info.metadata.items() if not key.startswith("tokenizer.")}
        count = sum(info.tensor_elements.values())
        if count:
            model_info["general.parameter_count"] = count
        chat_template = info.metadata.get("tokenizer.chat_template")
        template = template or (chat_template if isinstance(chat_template, str) else None)
    context = manager.context_length(model_id)
    parameters = f"num_ctx {context}" if context else ""
    return {"modelfile": f"# ModelDeck serves {model_id}\nFROM {spec.path or spec.url or model_id}\n",
            "parameters": parameters, "template": template or "", "details": _details(spec, info),
            "model_info": model_info, "capabilities": capabilities(manager, model_id, template),
            "modified_at": _modified_at(spec), "license": ""}  # fmt: skip


def _expires_at(ttl_s: float | None) -> str:
    """When an idle model is stopped: its TTL from now (the manager counts from its last request, which the
    listing does not see), or never."""
    if ttl_s is None:
        return _FOREVER
    moment = datetime.fromtimestamp(time.time() + ttl_s, UTC)
    return moment.isoformat().replace("+00:00", "Z")


async def ps(manager: EngineManager, cache: HeaderCache) -> dict[str, Any]:
    """GET /api/ps: the models whose engines are loaded (starting or ready)."""
    loaded = []
    for model_id in list(manager.models):
        record = manager.describe(model_id)
        if record["state"] not in ("ready", "starting") or record["source"] in ("remote", "external"):
            continue
        spec = manager.models[model_id]
        info = await asyncio.to_thread(cache.header, spec)
        entry = _entry(spec, info)
        expires_at = _expires_at(record["idle_ttl_s"])
        entry.update(size=record["rss_bytes"] or spec.size_bytes, size_vram=0, expires_at=expires_at,
                     context_length=manager.context_length(model_id))  # fmt: skip
        loaded.append(entry)
    return {"models": loaded}


def version() -> dict[str, Any]:
    """GET /api/version: the Ollama API version followed, and ModelDeck's own."""
    return {"version": OLLAMA_API_VERSION, "modeldeck_version": __version__}
