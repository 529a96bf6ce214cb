"""The Hugging Face token in the OS keyring: saved, read with a timeout, removed, and kept out of reprs."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import keyring
import pytest
from keyring.backend import KeyringBackend

from app.hub.token import HubToken, TokenStoreError, clear_token, read_token, save_token
from tests.app.test_keys import MemoryKeyring


class HangingKeyring(MemoryKeyring):
    """A keyring that does not answer, as a locked wallet waiting for an unseen password prompt does."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def get_password(self, service: str, username: str) -> str | None:
        self.release.wait(30)
        return None


@pytest.fixture
def memory_keyring(monkeypatch: pytest.MonkeyPatch) -> Iterator[MemoryKeyring]:
    monkeypatch.delenv("HF_TOKEN", raising=False)
    backend = MemoryKeyring()
    previous = keyring.get_keyring()
    keyring.set_keyring(backend)
    yield backend
    keyring.set_keyring(previous)


def test_token_is_saved_read_and_cleared(memory_keyring: MemoryKeyring) -> None:
    assert read_token() == HubToken(None, "none")
    save_token("  hf_abc \n")
    assert read_token() == HubToken("hf_abc", "keyring")
    assert "hf_abc" not in repr(read_token())
    assert clear_token() and not clear_token()
    assert read_token().value is None


def test_environment_wins(memory_keyring: MemoryKeyring, monkeypatch: pytest.MonkeyPatch) -> None:
    save_token("hf_keyring")
    monkeypatch.setenv("HF_TOKEN", "hf_env")
    assert read_token() == HubToken("hf_env", "environment")


def test_a_hanging_keyring_is_given_up_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_TOKEN", raising=False)
    backend = HangingKeyring()
    previous: KeyringBackend = keyring.get_keyring()
    keyring.set_keyring(backend)
    try:
        started = time.monotonic()
        token = read_token(timeout_s=0.3)
        assert time.monotonic() - started < 2
        assert token.value is None and "did not answer within 0.3 s" in token.note
    finally:
        backend.release.set()
        keyring.set_keyring(previous)


def test_no_keyring_means_no_token_saved(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_TOKEN", raising=False)
    with pytest.raises(TokenStoreError, match="set HF_TOKEN"):
        save_token("hf_abc")
    assert read_token().value is None
