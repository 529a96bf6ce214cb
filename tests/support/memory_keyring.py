"""An in-memory keyring backend for the tests.

The OS keyrings (Secret Service, Keychain, Credential Locker) cannot exist on the headless test machines, so this
real `keyring` backend class stands in for them: it keeps its secrets in the process that uses it. A service
started as a subprocess gets it through PYTHON_KEYRING_BACKEND=tests.support.memory_keyring.MemoryKeyring.
"""

from __future__ import annotations

from keyring.backend import KeyringBackend

BACKEND_NAME = "tests.support.memory_keyring.MemoryKeyring"


class MemoryKeyring(KeyringBackend):
    """A keyring backend with a real keyring's priority, holding its secrets in a dict."""

    priority = 5  # type: ignore[assignment]

    def __init__(self) -> None:
        super().__init__()
        self.secrets: dict[tuple[str, str], str] = {}

    def get_password(self, service: str, username: str) -> str | None:
        return self.secrets.get((service, username))

    def set_password(self, service: str, username: str, password: str) -> None:
        self.secrets[(service, username)] = password

    def delete_password(self, service: str, username: str) -> None:
        self.secrets.pop((service, username), None)
