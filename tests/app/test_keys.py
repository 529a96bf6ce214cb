"""Where the endpoint's API key lives: the environment, an OS keyring, or the user-only file."""

from __future__ import annotations

import stat
from collections.abc import Iterator

import keyring
import keyring.backends.null
import pytest
from keyring.backend import KeyringBackend

from app.keys import load_api_key
from app.paths import AppPaths
from tests.support.memory_keyring import MemoryKeyring


@pytest.fixture
def use_keyring(request: pytest.FixtureRequest) -> Iterator[KeyringBackend]:
    backend: KeyringBackend = request.param()
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
    assert "no OS keyring is available" in first.note and str(paths.api_key_file) in first.note
    assert "keyring.backends" not in first.note and "password store" in first.note  # plain words, no class name
    assert stat.S_IMODE(paths.api_key_file.stat().st_mode) == 0o600
    assert load_api_key(paths).value == first.value
    assert len(first.value) > 30


def test_a_key_file_that_is_no_text_is_kept_aside_and_a_new_key_made(paths: AppPaths) -> None:
    paths.api_key_file.parent.mkdir(parents=True)
    paths.api_key_file.write_bytes(b"\xff\xfe not a key")
    key = load_api_key(paths)
    assert key.source == "file" and len(key.value) > 30 and "made a new key" in key.note
    assert paths.api_key_file.with_name(paths.api_key_file.name + ".bad").read_bytes() == b"\xff\xfe not a key"
    assert load_api_key(paths).value == key.value


@pytest.mark.parametrize("use_keyring", [MemoryKeyring], indirect=True)
def test_keyring_keeps_the_key(paths: AppPaths, use_keyring: MemoryKeyring) -> None:
    first = load_api_key(paths)
    assert first.source == "keyring" and not first.note
    assert load_api_key(paths).value == first.value
    assert not paths.api_key_file.exists()
    assert list(use_keyring.secrets.values()) == [first.value]


@pytest.mark.parametrize("use_keyring", [keyring.backends.null.Keyring], indirect=True)
def test_a_keyring_that_forgets_is_not_trusted(paths: AppPaths, use_keyring: KeyringBackend) -> None:
    key = load_api_key(paths)
    assert key.source == "file"
    assert load_api_key(paths).value == key.value
