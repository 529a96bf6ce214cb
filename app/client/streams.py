"""Streams that stay open: the service's live events, and a chat answer through the OpenAI endpoint, each ended at
once from another thread."""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import httpx

from app.api_types import EndpointRecord, ServiceEvent, event_from_json
from app.client.http import ControlError, ServiceAddress, ServiceUnavailable


class EventStream:
    """The service's live events. Iterate in one thread; `close()` from any thread ends the stream at once.

    Closing an httpx client does not wake a thread blocked reading its socket, so `close()` shuts the
    stream's socket down instead, which does.
    """

    def __init__(self, address: ServiceAddress) -> None:
        self._breaker = _StreamBreaker()
        self._http = httpx.Client(
            base_url=address.control_url,
            headers={"Authorization": f"Bearer {address.token}"},
            timeout=httpx.Timeout(10.0, read=None),
            trust_env=False,
        )

    def __iter__(self) -> Iterator[ServiceEvent]:
        try:
            with self._http.stream("GET", "/api/events", extensions={"trace": self._breaker.trace}) as response:
                if response.status_code != 200:
                    raise ServiceUnavailable(f"The service refused the event stream ({response.status_code}).")
                for line in response.iter_lines():
                    if line.startswith("data: "):
                        try:
                            event = event_from_json(json.loads(line[6:]))
                        except ValueError as exc:
                            raise ControlError(str(exc)) from None
                        yield event
        except httpx.HTTPError as exc:
            if not self._breaker.broken:
                raise ServiceUnavailable(f"The event stream from the service ended: {exc}") from exc
        finally:
            self._http.close()

    def close(self) -> None:
        self._breaker.break_stream()


class _StreamBreaker:
    """Ends a streamed request from another thread: closing an httpx client does not wake a thread blocked
    reading its socket, shutting the socket down does. `trace` is the request's httpcore trace hook: it learns
    the socket once connected, before the answer's head, which a chat for a model still loading waits for."""

    _CONNECTED = frozenset({"connection.connect_tcp.complete", "connection.start_tls.complete"})

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._socket: socket.socket | None = None
        self.broken = False

    def trace(self, event_name: str, info: dict[str, Any]) -> None:
        if event_name not in self._CONNECTED:
            return
        stream = info.get("return_value")
        sock = stream.get_extra_info("socket") if stream is not None else None
        if isinstance(sock, socket.socket):
            with self._lock:
                self._socket = sock
                broken = self.broken
            if broken:  # broken while it was connecting
                _shut_down(sock)

    def break_stream(self) -> None:
        with self._lock:
            self.broken = True
            sock = self._socket
        if sock is not None:
            _shut_down(sock)


def _shut_down(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # already closed: the stream ended on its own
        sock.shutdown(socket.SHUT_RDWR)


class ChatStream:
    """One streamed chat completion through the OpenAI endpoint. Iterate in one thread to get the content deltas;
    `cancel()` from any thread ends it at once (as EventStream.close does, by shutting the socket down)."""

    def __init__(
        self,
        url: str,
        api_key: str,
        model_id: str,
        messages: list[dict[str, str]],
        max_tokens: int,
        cert_path: str | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        self._breaker = _StreamBreaker()
        # `options`: sampling fields of the request (temperature, top_p, seed, stop, max_tokens over `max_tokens`)
        self._body = {"model": model_id, "messages": messages, "max_tokens": max_tokens, **(options or {}),
                      "stream": True}  # fmt: skip
        self._url, self._api_key, self._cert_path = url, api_key, cert_path

    def _client(self) -> httpx.Client:
        # Made by the thread that iterates. A plain-HTTP endpoint gets no certificate store: loading one takes
        # 100-200 ms holding the interpreter lock, which froze the window at every message.
        verify: ssl.SSLContext | bool = self._url.startswith("https:")
        if self._cert_path:
            verify = endpoint_tls_context(self._cert_path)
        return httpx.Client(
            base_url=self._url.rstrip("/"),
            headers={"Authorization": f"Bearer {self._api_key}"} if self._api_key else {},
            timeout=httpx.Timeout(10.0, read=None),  # a model may load before its first token
            trust_env=False,
            verify=verify,
        )

    @property
    def cancelled(self) -> bool:
        return self._breaker.broken

    def __iter__(self) -> Iterator[str]:
        http = self._client()
        try:
            trace = {"trace": self._breaker.trace}
            with http.stream("POST", "/chat/completions", json=self._body, extensions=trace) as response:
                if response.status_code != 200:
                    response.read()
                    raise ControlError(f"The endpoint refused the chat: {_error_text(response)}", response.status_code)
                for line in response.iter_lines():
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    try:
                        chunk = json.loads(line[6:])
                    except ValueError:  # a server ModelDeck did not start (--upstream, --remote) sent it
                        raise ControlError(f"The answer broke off: an event that is not JSON: {line[6:86]!r}") from None
                    if not isinstance(chunk, dict):
                        continue
                    if chunk.get("error") is not None:  # the engine failed with the stream open
                        raise ControlError(_event_error_text(chunk["error"]))
                    for choice in chunk.get("choices") or []:
                        content = (choice.get("delta") or {}).get("content")
                        if content:
                            yield str(content)
        except httpx.HTTPError as exc:
            if not self._breaker.broken:
                raise ServiceUnavailable(f"The chat stream ended: {exc}") from exc
        finally:
            http.close()

    def cancel(self) -> None:
        self._breaker.break_stream()


def _event_error_text(error: object) -> str:
    """The message of an error event that ended a stream (the gateway's, or an engine's)."""
    message = error.get("message") if isinstance(error, dict) else error
    return str(message) if message else "The stream ended with an error."


def _error_text(response: httpx.Response) -> str:
    """The message of an OpenAI-style error body, or the body itself."""
    try:
        return str(response.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return response.text


def stream_chat(
    endpoint: EndpointRecord,
    model_id: str,
    messages: list[dict[str, str]],
    max_tokens: int = 256,
    options: Mapping[str, Any] | None = None,
) -> ChatStream:
    """A streamed chat with `model_id` at the endpoint that `ControlClient.endpoint()` describes ({url, api_key,
    tls}); `options` are further request fields (temperature, top_p, seed, stop)."""
    cert = tls["cert_path"] if (tls := endpoint.get("tls")) else None
    return ChatStream(endpoint["url"], endpoint.get("api_key") or "", model_id, messages, max_tokens, cert, options)


def endpoint_tls_context(cert_path: str) -> ssl.SSLContext:
    """What a client of the endpoint verifies its certificate with: the system's authorities, and the endpoint's
    own certificate (self-signed by ModelDeck, or the user's) trusted besides."""
    context = ssl.create_default_context()
    context.load_verify_locations(cafile=cert_path)
    return context
