"""The API key of the OpenAI endpoint: in the OS keyring, with a clearly reported user-only file fallback."""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass

import keyring
import keyring.errors

from app.bad_files import set_aside
from app.paths import AppPaths
from engines.atomic_files import write_atomically

API_KEY_ENV = "MODELDECK_API_KEY"
KEYRING_SERVICE = "modeldeck"


@dataclass(frozen=True)
class ApiKey:
    """The key and where it came from ("environment", "keyring" or "file"); `note` explains a fallback."""

    value: str
    source: str
    note: str = ""


def new_secret() -> str:
    return "md-" + secrets.token_urlsafe(32)


def _keyring_username(paths: AppPaths) -> str:
    # Every MODELDECK_HOME is a separate installation with its own key.
    return f"api-key:{paths.config}"


def insecure_keyring_reason() -> str | None:
    """Why the active keyring backend is not a real OS keyring, or None when it is.

    Backends below priority 1 are keyring's stand-ins (fail, null) or plain files (keyrings.alt): a key there
    is no safer than in ModelDeck's own user-only file, and calling it a keyring would mislead the user.
    """
    backend = keyring.get_keyring()
    candidates = getattr(backend, "backends", None) or [backend]  # a ChainerBackend holds several
    if any(candidate.priority >= 1 for candidate in candidates):
        return None
    # In words a user can act on: the backend's class name (keyring.backends.fail.Keyring) tells them nothing.
    return (
        "no OS keyring is available (this system runs no password store such as GNOME Keyring, KWallet, "
        "the macOS Keychain or the Windows Credential Manager)"
    )


def _from_keyring(paths: AppPaths) -> ApiKey | str:
    """The key kept in the OS keyring (stored there first if new), or why the keyring cannot be used."""
    username = _keyring_username(paths)
    try:
        stored = keyring.get_password(KEYRING_SERVICE, username)
        if stored:
            return ApiKey(stored, "keyring")
        if paths.api_key_file.exists():
            return "a key file from an earlier run exists"
        fresh = new_secret()
        keyring.set_password(KEYRING_SERVICE, username, fresh)
        if keyring.get_password(KEYRING_SERVICE, username) == fresh:
            return ApiKey(fresh, "keyring")
        return "the keyring did not keep the key"
    except keyring.errors.KeyringError as exc:
        return f"no usable OS keyring: {exc}"


def load_api_key(paths: AppPaths) -> ApiKey:
    """Return the endpoint key: $MODELDECK_API_KEY, else the keyring's, else the fallback file's.

    A key is generated on first use. The file fallback is used only when no keyring backend works.
    """
    from_env = os.environ.get(API_KEY_ENV, "").strip()
    if from_env:
        return ApiKey(from_env, "environment")
    reason = insecure_keyring_reason() or _from_keyring(paths)
    if isinstance(reason, ApiKey):
        return reason
    note = f"{reason}; the key is kept in {paths.api_key_file}, readable only by you"
    try:
        value = paths.api_key_file.read_bytes().decode("utf-8").strip() if paths.api_key_file.exists() else ""
    except UnicodeDecodeError:  # not a key this program wrote: clients with the old one must be given the new one
        note += f"; the file held no readable key, kept it as {set_aside(paths.api_key_file).name} and made a new key"
        value = ""
    if not value:
        value = new_secret()
        write_atomically(paths.api_key_file, value + "\n")
    return ApiKey(value, "file", note)


class KeyNotReplaceable(Exception):
    """The key cannot be replaced from here; the message says where it comes from instead."""


def replace_api_key(paths: AppPaths, current: ApiKey) -> ApiKey:
    """Store a new key where `current` is kept (keyring or file) and return it; the old one stops working once
    the service uses the new one."""
    if current.source == "environment":
        raise KeyNotReplaceable(f"the key comes from ${API_KEY_ENV}: change it there and restart the service")
    fresh = new_secret()
    if current.source == "keyring":
        try:
            keyring.set_password(KEYRING_SERVICE, _keyring_username(paths), fresh)
            if keyring.get_password(KEYRING_SERVICE, _keyring_username(paths)) == fresh:
                return ApiKey(fresh, "keyring")
        except keyring.errors.KeyringError as exc:
            raise KeyNotReplaceable(f"the OS keyring did not keep the new key: {exc}") from exc
        raise KeyNotReplaceable("the OS keyring did not keep the new key")
    write_atomically(paths.api_key_file, fresh + "\n")
    return ApiKey(fresh, "file", current.note)
