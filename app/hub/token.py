"""The Hugging Face token: kept in the OS keyring, read with a timeout, handed to Hub calls as an argument.

It is never written to huggingface_hub's plain-text token file and never logged. HF_TOKEN in the environment, the
variable huggingface_hub users already know, takes precedence (headless servers often have no keyring).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

import keyring
import keyring.errors

from app.keys import KEYRING_SERVICE, insecure_keyring_reason

TOKEN_ENV = "HF_TOKEN"
KEYRING_USERNAME = "huggingface-token"
READ_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class HubToken:
    """The token (None: none saved) and where it came from; `note` says why a keyring could not be read."""

    value: str | None
    source: str  # "environment", "keyring" or "none"
    note: str = ""

    def __repr__(self) -> str:  # keeps the secret out of tracebacks and debug logs
        return f"HubToken(value={'<redacted>' if self.value else None}, source={self.source!r}, note={self.note!r})"


class TokenStoreError(Exception):
    """The token could not be saved or removed; the message says why and what to do instead."""


def read_token(timeout_s: float = READ_TIMEOUT_S) -> HubToken:
    """The token from $HF_TOKEN, else from the keyring. A keyring that hangs (a locked wallet waiting for a
    password prompt nobody sees) is given `timeout_s`, then the call goes on without a token."""
    from_env = os.environ.get(TOKEN_ENV, "").strip()
    if from_env:
        return HubToken(from_env, "environment")
    if insecure_keyring_reason() is not None:
        return HubToken(None, "none")
    result: list[str | None] = []
    problem: list[str] = []

    def read() -> None:
        try:
            result.append(keyring.get_password(KEYRING_SERVICE, KEYRING_USERNAME))
        except keyring.errors.KeyringError as exc:
            problem.append(str(exc))

    # A daemon thread: a keyring call that never returns must not keep the process alive at exit.
    reader = threading.Thread(target=read, name="hf-token-read", daemon=True)
    reader.start()
    reader.join(timeout_s)
    if reader.is_alive():
        return HubToken(None, "none", f"the OS keyring did not answer within {timeout_s:g} s; going on without a token")
    if problem:
        return HubToken(None, "none", f"could not read the OS keyring: {problem[0]}")
    value = result[0] if result else None
    return HubToken(value, "keyring") if value else HubToken(None, "none")


def save_token(value: str) -> None:
    """Store the token in the OS keyring. With no real keyring it refuses rather than write the token in clear."""
    value = value.strip()
    if not value:
        raise TokenStoreError("the token is empty")
    reason = insecure_keyring_reason()
    if reason is not None:
        raise TokenStoreError(f"{reason}: set {TOKEN_ENV} in the environment instead")
    try:
        keyring.set_password(KEYRING_SERVICE, KEYRING_USERNAME, value)
    except keyring.errors.KeyringError as exc:
        raise TokenStoreError(f"the OS keyring did not keep the token: {exc}") from exc


def clear_token() -> bool:
    """Remove the token from the keyring; False when none was saved."""
    if insecure_keyring_reason() is not None:
        return False
    try:
        if keyring.get_password(KEYRING_SERVICE, KEYRING_USERNAME) is None:
            return False
        keyring.delete_password(KEYRING_SERVICE, KEYRING_USERNAME)
    except keyring.errors.PasswordDeleteError:
        return False
    except keyring.errors.KeyringError as exc:
        raise TokenStoreError(f"could not remove the token from the OS keyring: {exc}") from exc
    return True
