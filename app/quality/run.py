"""From a request (a model, maybe chosen variants, a reference, a text) to a quality card, which the caller saves."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path

from app.hardware.fingerprint import hardware_fingerprint
from app.hub.library import ModelSpec, known_models
from app.installs.llama_tools_build import ToolsBuild, find_tools
from app.paths import AppPaths
from app.quality.card import QualityCard, card_id
from app.quality.family import Subject, checked, family, file_subject, most_precise, subject_of
from app.quality.measure import Layout, Progress, measure
from app.quality.text import TextSource, default_text, user_text
from app.task import TaskState
from app.version import provenance


class SetupError(Exception):
    """The request names something that is not there; the message says what, `param` which field of the request
    (None: something the machine lacks)."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class RunRequest:
    model: str
    variants: tuple[str, ...] = ()  # empty: every variant of the model in the library
    reference: str | None = None  # a variant id or a GGUF file; None: the most precise variant
    data: Path | None = None  # the user's text; None: the default text
    tokens: int = 4096
    models_dirs: tuple[Path, ...] = ()  # the user's models folders (`--models-dir`), read besides ModelDeck's own


@dataclass(frozen=True)
class Setup:
    request: RunRequest
    tools: ToolsBuild
    reference: Subject
    variants: list[Subject]  # the reference included
    text: TextSource


def library_model(paths: AppPaths, model_id: str, models_dirs: tuple[Path, ...] = ()) -> ModelSpec:
    models = known_models(paths, models_dirs)
    spec = models.get(model_id)
    if spec is None:
        raise SetupError(f"unknown model {model_id!r}: `modeldeck models` lists them", "model")
    if spec.path is None or not spec.path.is_file() or spec.path.suffix.lower() != ".gguf":
        raise SetupError(f"{model_id} is not a GGUF file: quality runs need llama.cpp's tools", "model")
    return spec


def not_local(model_id: str, server: str) -> str:
    """Why a model that `server` serves ("remote NAME", "the --upstream server at URL") cannot be measured: the
    tools read the model's GGUF file, which is not on this machine."""
    return f"{model_id} is served by {server}: quality runs need a local GGUF model"


def tools_or_fail(paths: AppPaths) -> ToolsBuild:
    tools = find_tools(paths.engine_builds)
    if tools is None:
        raise SetupError("llama.cpp's quality tools are not built: run `modeldeck engines build llama-tools` "
                         "(a few minutes)")  # fmt: skip
    return tools


def _chosen(paths: AppPaths, request: RunRequest) -> tuple[list[Subject], Subject]:
    library = known_models(paths, request.models_dirs)
    spec = library_model(paths, request.model, request.models_dirs)
    members = family(spec, library.values())
    precise = most_precise(members)  # of the whole library, whichever variants are measured
    if request.variants:
        by_id = {s.id: s for s in members}
        unknown = [v for v in request.variants if v not in by_id]
        if unknown:
            raise SetupError(f"{unknown[0]} is not a variant of {request.model}; its variants: "
                             f"{', '.join(by_id)}", "variants")  # fmt: skip
        members = [by_id[v] for v in dict.fromkeys(request.variants)]
    if request.reference is None:
        reference = precise
    else:
        named = next((s for s in members if s.id == request.reference), None)
        if named is None and request.reference in library:
            named = subject_of(library[request.reference])
        if named is None:
            try:
                named = file_subject(Path(request.reference))
            except ValueError:
                raise SetupError(f"reference {request.reference!r} is neither a variant nor a file",
                                 "reference") from None  # fmt: skip
        reference = named
    try:
        checked(reference)
    except ValueError as exc:
        raise SetupError(str(exc), "reference" if request.reference is not None else "model") from None
    try:
        variants = [reference, *(checked(s) for s in members if s.path != reference.path)]
    except ValueError as exc:
        raise SetupError(str(exc), "variants") from None
    if len(variants) < 2:
        raise SetupError(f"{request.model} has no other variant to compare with {reference.id}: make one with "
                         f"`modeldeck quantize {request.model} --to Q4_K_M`", "variants")  # fmt: skip
    return variants, reference


def check_request(paths: AppPaths, request: RunRequest) -> None:
    """What `prepare` checks, without writing the default text (a run going may be reading it): the service asks
    this before it starts a run's child, to refuse a request that could only fail there."""
    _chosen(paths, request)
    tools_or_fail(paths)
    if request.data is not None:
        user_text(request.data)


def prepare(paths: AppPaths, request: RunRequest, text_dir: Path | None = None) -> Setup:
    """Check everything the run needs before it starts; SetupError or TextError (from app.quality.text)."""
    Layout.for_tokens(request.tokens)
    variants, reference = _chosen(paths, request)
    tools = tools_or_fail(paths)
    text = user_text(request.data) if request.data is not None else default_text(
        text_dir or paths.cache / "quality", request.tokens)  # fmt: skip
    return Setup(request, tools, reference, variants, text)


def run_quality(
    paths: AppPaths, setup: Setup, workdir: Path, state: TaskState, progress: Progress, *, threads: int | None = None
) -> QualityCard:
    """Measure, and return the card, not yet saved: one that cannot be saved is still the caller's to show."""
    from app.hardware.detect import detect_hardware

    now = datetime.datetime.now(datetime.UTC)
    layout = Layout.for_tokens(setup.request.tokens)
    new_id = card_id(now.strftime("%Y%m%dT%H%M%S"), setup.request.model)
    measured = measure(setup.tools, setup.reference, setup.variants, setup.text.path, workdir,
                       paths.logs / "quality" / f"{new_id}.log", layout, state, progress, threads=threads)  # fmt: skip
    hardware = detect_hardware(paths.models_dir).to_dict()
    scored = measured.chunks * (measured.n_ctx - 1 - measured.n_ctx // 2)
    return QualityCard(
        id=new_id,
        created=now.isoformat(timespec="seconds"),
        modeldeck_version=provenance().version,
        model=setup.request.model,
        reference=setup.reference.id,
        tool={"name": "llama-perplexity", "version": setup.tools.version, "backend": setup.tools.backend,
              "folder": str(setup.tools.folder)},
        hardware=hardware_fingerprint(hardware),
        text={**setup.text.to_dict(), "tokens": scored, "tokens_read": measured.chunks * measured.n_ctx,
              "n_ctx": measured.n_ctx, "chunks": measured.chunks},
        results=measured.results,
    )  # fmt: skip
