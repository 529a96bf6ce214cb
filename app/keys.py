"""The API key of the OpenAI endpoint: in the OS keyring, with a clearly reported user-only file fallback."""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass

import keyring
import keyring.errors

from app.paths import AppPaths, write_private

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


def load_api_key(paths: AppPaths) -> ApiKey:
    """Return the endpoint key: $MODELDECK_API_KEY, else the keyring's, else the fallback file's.

    A key is generated on first use. The file fallback is used only when no keyring backend works.
    """
    from_env = os.environ.get(API_KEY_ENV, "").strip()
    if from_env:
        return ApiKey(from_env, "environment")
    username = _keyring_username(paths)
    try:
        stored = keyring.get_password(KEYRING_SERVICE, username)
        if stored:
            return ApiKey(stored, "keyring")
        if not paths.api_key_file.exists():
            fresh = new_secret()
            keyring.set_password(KEYRING_SERVICE, username, fresh)
            if keyring.get_password(KEYRING_SERVICE, username) == fresh:
                return ApiKey(fresh, "keyring")
        reason = "the keyring did not keep the key" if not paths.api_key_file.exists() else "a key file exists"
    except keyring.errors.KeyringError as exc:
        reason = f"no usable OS keyring: {exc}"
    value = paths.api_key_file.read_text(encoding="utf-8").strip() if paths.api_key_file.exists() else ""
    if not value:
        value = new_secret()
        write_private(paths.api_key_file, value + "\n")
    return ApiKey(value, "file", f"{reason}; the key is kept in {paths.api_key_file}, readable only by you")
