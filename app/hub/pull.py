"""`pull REPO[:QUANT|/FILE]`: pick the files of one variant (a GGUF quantization, or the safetensors weights with
their config and tokenizer for vLLM), download them, preflight them, register them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from app.hub.cache import check_filename, check_repo_id
from app.hub.download import (
    DEFAULT_RETRY,
    FreeBytes,
    RetryPolicy,
    disk_free,
    download_files,
    resolve,
)
from app.hub.errors import HubError
from app.hub.hub_api import ModelDetails, model_details
from app.hub.library import bundled_model, local_models, model_id_from_filename
from app.hub.pulled import PulledModel, record_pull
from app.hub.remote_file import RemoteFile
from app.hub.safetensors_check import check_model_folder
from app.hub.stores import FolderStore, Store, folder_for_repo
from app.hub.variants import SAFETENSORS, Variant, pick_variant
from app.paths import AppPaths
from app.task import TaskState
from engines.gguf import GGUFError, read_gguf_info

_SPLIT_SUFFIX = re.compile(r"-\d{5}-of-\d{5}(?=\.gguf$)")


@dataclass(frozen=True)
class PullRequest:
    """What the user asked for: a repository and, optionally, a variant (quantization) or one file in it."""

    repo_id: str
    variant: str | None = None
    filename: str | None = None

    @classmethod
    def parse(cls, text: str) -> PullRequest:
        """`org/name`, `org/name:Q4_K_M` or `org/name/path/file.gguf`."""
        spec, _, variant = text.partition(":")
        parts = spec.split("/")
        if len(parts) < 2:
            raise HubError(
                f"expected organization/name[:QUANT] or organization/name/FILE, got {text!r}", kind="bad_name"
            )
        repo_id = check_repo_id("/".join(parts[:2]))
        filename = check_filename("/".join(parts[2:])) if len(parts) > 2 else None
        if filename and variant:
            raise HubError("give a quantization (REPO:QUANT) or a file (REPO/FILE), not both", kind="bad_name")
        return cls(repo_id, variant or None, filename)


def describe_variants(variants: tuple[Variant, ...]) -> str:
    return ", ".join(f"{v.name} ({(v.size or 0) / 1e9:.2f} GB)" for v in variants) or "none"


def all_variants(details: ModelDetails) -> tuple[Variant, ...]:
    """The GGUF variants, then the safetensors one (for vLLM) when the repository has it."""
    return details.variants + ((details.safetensors,) if details.safetensors is not None else ())


def choose_variant(request: PullRequest, details: ModelDetails) -> Variant:
    """The variant to fetch: the one named, the one holding the file named, or the only one there is."""
    variants = all_variants(details)
    example = f"modeldeck pull {request.repo_id}:{variants[0].name}" if variants else ""
    if request.filename is not None:
        chosen = next((v for v in variants if request.filename in {f.path for f in v.files}), None)
        if chosen is None:
            raise HubError(f"{request.filename} is not a model file of {request.repo_id}", kind="not_found")
    elif request.variant is not None:
        found = pick_variant(list(variants), request.variant)
        if found is None:
            raise HubError(
                f"{request.repo_id} has no {request.variant}; it has: {describe_variants(variants)}", kind="not_found"
            )
        chosen = found
    elif len(variants) == 1:
        chosen = variants[0]
    elif not variants:
        raise HubError(
            f"{request.repo_id} has no GGUF files and no safetensors model (config.json and *.safetensors) "
            "ModelDeck can serve",
            kind="not_found",
        )
    else:
        raise HubError(
            f"{request.repo_id} has {len(variants)} variants: {describe_variants(variants)}; pick one, e.g. {example}",
            kind="variant_required",
        )
    if not chosen.complete:
        raise HubError(f"{chosen.name} of {request.repo_id} is split into {chosen.parts_expected} parts, not all there")
    return chosen


def pull(
    request: PullRequest,
    paths: AppPaths,
    state: TaskState,
    *,
    endpoint: str,
    token: str | None,
    cache_dir: Path,
    retry: RetryPolicy = DEFAULT_RETRY,
    free_bytes: FreeBytes = disk_free,
    models_dir: Path | None = None,
) -> PulledModel:
    """Download a variant into the cache (or, given `models_dir`, as plain files in that folder), check an engine
    may read it, and add it to the library."""
    details = model_details(request.repo_id, endpoint=endpoint, token=token)
    variant = choose_variant(request, details)
    remote = [resolve(request.repo_id, f.path, endpoint=endpoint, token=token) for f in variant.files]
    folder_store = None
    if models_dir is not None:
        folder_store = FolderStore(
            models_dir, folder_for_repo(request.repo_id) if variant.name == SAFETENSORS else None
        )
    store: Path | Store = folder_store or cache_dir
    try:
        files = download_files(remote, store, state, token=token, endpoint=endpoint, retry=retry, free_bytes=free_bytes)
    except KeyboardInterrupt:  # Ctrl-C on the command line (the service stops a pull through `state`)
        if folder_store is not None:
            folder_store.set_aside(remote, state.placed, state.made_folder)
        raise
    try:
        return _register(request, variant, remote, files, paths)
    except HubError:
        if folder_store is not None:  # a folder the library scans must not keep files no engine can read
            # A file found there (the user's, another pull's) stays
            folder_store.take_back(state.placed, state.made_folder)
            state.record_taken_back()
        raise


def _register(
    request: PullRequest, variant: Variant, remote: list[RemoteFile], files: list[Path], paths: AppPaths
) -> PulledModel:
    """Check the verified files are what an engine may read, then add them to the library."""
    taken = _taken_ids(paths, files)
    if variant.name == SAFETENSORS:
        try:
            check_model_folder(files)
        except ValueError as exc:
            raise HubError(f"downloaded and verified, but not a model vLLM can serve, so not added: {exc}") from exc
        base_id = model_id_from_filename(request.repo_id.split("/")[1]) or "model"
        return record_pull(
            paths, request.repo_id, variant.name, remote[0].commit, files, base_id, taken,
            model_format=SAFETENSORS, hashes=tuple(r.etag for r in remote),
        )  # fmt: skip
    for file in files:
        try:
            read_gguf_info(file)
        except GGUFError as exc:
            raise HubError(
                f"downloaded and verified, but not a usable GGUF, so not added to the library: {exc}"
            ) from exc
    base_id = model_id_from_filename(_SPLIT_SUFFIX.sub("", variant.files[0].path.rsplit("/", 1)[-1])) or "model"
    return record_pull(
        paths, request.repo_id, variant.name, remote[0].commit, files, base_id, taken,
        hashes=tuple(r.etag for r in remote),
    )  # fmt: skip


def _taken_ids(paths: AppPaths, files: list[Path]) -> set[str]:
    """Ids other models hold; a file just pulled into the models folder does not count against itself."""
    bundled = bundled_model()
    ours = {file.resolve() for file in files} | {file.parent.resolve() for file in files}
    local = {spec.id for spec in local_models(paths.models_dir) if spec.path is None or spec.path.resolve() not in ours}
    return local | ({bundled.id} if bundled else set())
