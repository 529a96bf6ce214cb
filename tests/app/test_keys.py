"""Where the endpoint's API key lives: the environment, a real keyring backend, or the user-only file."""

from __future__ import annotations

import base64
import stat
from collections.abc import Iterator
from pathlib import Path

import keyring
import pytest
from keyrings.alt.file import PlaintextKeyring

from app.keys import load_api_key
from app.paths import AppPaths


@pytest.fixture
def file_keyring(tmp_path: Path) -> Iterator[PlaintextKeyring]:
    """keyrings.alt's plaintext backend: a real keyring implementation, kept in a temporary file."""
    backend = PlaintextKeyring()
    backend.file_path = str(tmp_path / "keyring.cfg")  # type: ignore[misc]
    previous = keyring.get_keyring()
    keyring.set_keyring(backend)
    yield backend
    keyring.set_keyring(previous)


def test_environment_overrides(paths: AppPaths, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODELDECK_API_KEY", "from-env")
    key = load_api_key(paths)
    assert (key.value, key.source) == ("from-env", "environment")
    assert not paths.api_key_file.exists()


def test_no_keyring_falls_back_to_a_private_file(paths: AppPaths) -> None:
    first = load_api_key(paths)  # the test session's keyring backend is keyring.backends.fail
    assert first.source == "file"
    assert "no usable OS keyring" in first.note and str(paths.api_key_file) in first.note
    assert stat.S_IMODE(paths.api_key_file.stat().st_mode) == 0o600
    assert load_api_key(paths).value == first.value
    assert len(first.value) > 30


def test_keyring_keeps_the_key(paths: AppPaths, file_keyring: PlaintextKeyring) -> None:
    first = load_api_key(paths)
    assert first.source == "keyring" and not first.note
    assert load_api_key(paths).value == first.value
    assert not paths.api_key_file.exists()
    # the backend stores values base64-encoded in its file
    assert base64.b64encode(first.value.encode()).decode() in Path(file_keyring.file_path).read_text()
