"""The control API over HTTP: where the service listens, one authenticated connection to it, and what goes wrong."""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass
from typing import Any

import httpx


class ServiceUnavailable(Exception):
    """No service answers; the message says what to do."""


class ControlError(Exception):
    """The service answered with an error; the message is the service's, `status` its HTTP status."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class ServiceAddress:
    """Where the running service listens, as its discovery file says, and the bearer token of its control API."""

    pid: int
    url: str
    control_url: str
    token: str


def segment(text: str) -> str:
    """`text` as one segment of a URL's path: a remote's model `NAME/MODEL` stays one id, not two segments."""
    return urllib.parse.quote(text, safe="")


class ControlConnection:
    """One authenticated HTTP connection to the control API, its errors translated. Blocking: off the GUI thread."""

    def __init__(self, address: ServiceAddress, timeout_s: float = 10.0) -> None:
        self.address = address
        self._http = httpx.Client(
            base_url=address.control_url,
            headers={"Authorization": f"Bearer {address.token}"},
            timeout=timeout_s,
            trust_env=False,  # loopback only: never through a proxy from the environment
        )

    def close(self) -> None:
        self._http.close()

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise ServiceUnavailable(
                f"The ModelDeck service at {self.address.control_url} does not answer: {exc}"
            ) from exc
        if response.status_code >= 400:
            try:
                message = response.json()["error"]["message"]
            except (ValueError, KeyError, TypeError):
                message = response.text
            raise ControlError(message, response.status_code)
        return response.json()
