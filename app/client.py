"""The control-API client shared by the GUI and the CLI: finds the service, starts it, talks to it."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import ssl
import subprocess
import threading
import time
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
from filelock import FileLock, Timeout

from app.api_types import (
    AboutRecord,
    BenchCardRecord,
    BenchListing,
    BenchRunRecord,
    DeletedRecord,
    DownloadRecord,
    EndpointRecord,
    EngineBuildListing,
    EngineBuildRecord,
    HardwareRecord,
    HealthRecord,
    HubModelPage,
    HubSearchResult,
    ImportedRecord,
    LibraryRecord,
    ModelRecord,
    ModelSettingsRecord,
    QualityCardRecord,
    QualityListing,
    QualityRunRecord,
    RecommendationRecord,
    RemoteRecord,
    RemovedRecord,
    RequestRecord,
    SavedSettingsAnswer,
    SeriesAnswer,
    ServiceEvent,
    SettingsAnswer,
    VerdictRecord,
    event_from_json,
    library_from_json,
    model_from_json,
)
from app.bounded_json import load_json
from app.paths import AppPaths
from app.self_command import modeldeck_command

START_TIMEOUT_S = 30.0
HUB_TIMEOUT_S = 60.0  # the Hub may be slow; the service answers at once when it is unreachable
# The first hardware detection initialises NVML, and a recommendation reads model headers: allow more than a ping.
PLANNING_TIMEOUT_S = 30.0
PORT_ENV = "MODELDECK_PORT"
DEFAULT_PORT = 8642


def port_from_env() -> int | None:
    """$MODELDECK_PORT, or None when it is unset or empty; ValueError, saying why, when it is not a port number."""
    value = os.environ.get(PORT_ENV, "").strip()
    if not value:
        return None
    try:
        port = int(value)
    except ValueError:
        port = 0
    if not 0 < port < 65536:
        raise ValueError(f"${PORT_ENV} must be a port number from 1 to 65535, got {value!r}")
    return port


def default_port() -> int:
    """The port of the OpenAI endpoint: $MODELDECK_PORT, else 8642 (the service also reads the settings).
    ValueError when $MODELDECK_PORT is not a port number."""
    return port_from_env() or DEFAULT_PORT


def _segment(text: str) -> str:
    """`text` as one segment of a URL's path: a remote's model `NAME/MODEL` stays one id, not two segments."""
    return urllib.parse.quote(text, safe="")


class ServiceUnavailable(Exception):
    """No service answers; the message says what to do."""


class ControlError(Exception):
    """The service answered with an error; the message is the service's, `status` its HTTP status."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class ServiceAddress:
    pid: int
    url: str
    control_url: str
    token: str


def find_service(paths: AppPaths) -> ServiceAddress | None:
    """The running service's address from its discovery file, or None when none is published."""
    try:
        info = load_json(paths.service_file.read_bytes())
        token = paths.control_token_file.read_text(encoding="utf-8").strip()
        return ServiceAddress(int(info["pid"]), str(info["url"]), str(info["control_url"]), token)
    except (OSError, ValueError, KeyError, TypeError):  # ValueError: BadJson, not UTF-8, not JSON or nested too deeply
        return None


class ControlClient:
    """Synchronous client of the control API. Blocking: call it off the GUI thread."""

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

    def health(self) -> HealthRecord:
        result: HealthRecord = self._call("GET", "/api/health", timeout=2.0)
        return result

    def about(self) -> AboutRecord:
        """The service's version and commit, and each engine's installation (GET /api/about)."""
        result: AboutRecord = self._call("GET", "/api/about", timeout=120.0)
        return result

    def models(self) -> list[ModelRecord]:
        return [self._model(raw) for raw in self._call("GET", "/api/models")]

    def endpoint(self) -> EndpointRecord:
        result: EndpointRecord = self._call("GET", "/api/endpoint")
        return result

    def start_model(
        self, model_id: str, wait: bool = False, overrides: Mapping[str, int | str] | None = None
    ) -> ModelRecord:
        """Start a model; `overrides` (context, gpu_layers, threads, batch, engine, parallel) replace the default
        plan's values.

        A model already running with other values is not restarted: the service answers with an error.
        """
        params = {"wait": "1"} if wait else None
        body = dict(overrides) if overrides is not None else None
        return self._model(
            self._call("POST", f"/api/models/{_segment(model_id)}/start", params=params, json=body, timeout=None)
        )

    def model_settings(self, model_id: str) -> ModelSettingsRecord:
        """The model's saved load settings, the plan they make, the memory it needs and what is free (GET)."""
        result: ModelSettingsRecord = self._call(
            "GET", f"/api/models/{_segment(model_id)}/settings", timeout=PLANNING_TIMEOUT_S
        )
        return result

    def save_model_settings(self, model_id: str, settings: Mapping[str, int | str]) -> ModelSettingsRecord:
        """Keep these load settings for every later start of the model; an empty mapping forgets them (PUT)."""
        result: ModelSettingsRecord = self._call(
            "PUT", f"/api/models/{_segment(model_id)}/settings", json=dict(settings), timeout=PLANNING_TIMEOUT_S
        )
        return result

    def estimate_model_settings(self, model_id: str, settings: Mapping[str, int | str]) -> ModelSettingsRecord:
        """What `model_settings` would answer for these settings, without saving them."""
        result: ModelSettingsRecord = self._call(
            "POST",
            f"/api/models/{_segment(model_id)}/settings/estimate",
            json=dict(settings),
            timeout=PLANNING_TIMEOUT_S,
        )
        return result

    def hardware(self) -> HardwareRecord:
        """The service machine's hardware profile (CPU, memory, GPUs, and why a GPU cannot be used)."""
        result: HardwareRecord = self._call("GET", "/api/hardware", timeout=PLANNING_TIMEOUT_S)
        return result

    def recommend(self, model_id: str, use: str = "chat", users: int | None = None) -> RecommendationRecord:
        """How to run a model for a use (chat, serve, long-context): the best option, alternatives, reasons."""
        params: dict[str, str | int] = {"model": model_id, "use": use}
        if users is not None:
            params["users"] = users
        result: RecommendationRecord = self._call("GET", "/api/recommend", params=params, timeout=PLANNING_TIMEOUT_S)
        return result

    def stop_model(self, model_id: str) -> ModelRecord:
        return self._model(self._call("POST", f"/api/models/{_segment(model_id)}/stop", timeout=60.0))

    def _model(self, raw: Any) -> ModelRecord:
        try:
            return model_from_json(raw)
        except ValueError as exc:
            raise ControlError(str(exc)) from None

    def logs(self, model_id: str, tail: int = 200) -> list[str]:
        result: list[str] = self._call("GET", f"/api/models/{_segment(model_id)}/logs", params={"tail": tail})["lines"]
        return result

    # The Hub and the library -------------------------------------------------------------------------------

    def hub_search(
        self, query: str, sort: str = "downloads", limit: int = 20, model_format: str = "gguf"
    ) -> list[HubSearchResult]:
        """`model_format` is gguf (llama.cpp) or safetensors (vLLM)."""
        params = {"q": query, "sort": sort, "limit": limit, "format": model_format}
        result: list[HubSearchResult] = self._call("GET", "/api/hub/search", params=params, timeout=HUB_TIMEOUT_S)
        return result

    def hub_model(self, repo_id: str) -> HubModelPage:
        """A Hub model's page: files, variants, license, gated, and the variant suggested for this machine."""
        result: HubModelPage = self._call("GET", f"/api/hub/models/{repo_id}", timeout=HUB_TIMEOUT_S)
        return result

    def start_download(self, repo_id: str, variant: str | None = None, filename: str | None = None) -> DownloadRecord:
        body = {"repo": repo_id, "variant": variant, "file": filename}
        result: DownloadRecord = self._call("POST", "/api/downloads", json=body, timeout=HUB_TIMEOUT_S)
        return result

    def downloads(self) -> list[DownloadRecord]:
        result: list[DownloadRecord] = self._call("GET", "/api/downloads")
        return result

    def control_download(self, download_id: str, action: str) -> DownloadRecord:
        """`action` is pause, resume or cancel."""
        result: DownloadRecord = self._call("POST", f"/api/downloads/{download_id}/{action}", timeout=60.0)
        return result

    def library(self) -> LibraryRecord:
        """Every model with its size on disk and origin, and the free space where models are kept."""
        try:
            return library_from_json(self._call("GET", "/api/library", timeout=30.0))
        except ValueError as exc:
            raise ControlError(str(exc)) from None

    def verify_model(self, model_id: str) -> VerdictRecord:
        # Hashing a multi-gigabyte file takes as long as the disk needs.
        result: VerdictRecord = self._call("POST", f"/api/library/{_segment(model_id)}/verify", timeout=None)
        return result

    def delete_model(self, model_id: str) -> DeletedRecord:
        result: DeletedRecord = self._call("DELETE", f"/api/library/{_segment(model_id)}", timeout=60.0)
        return result

    def import_model(self, path: str, link: bool = False) -> ImportedRecord:
        """Copy a GGUF file (a path on the service's machine) into the library, after its header is checked; with
        `link`, hard-link it where the disk allows."""
        body = {"path": path, "link": True} if link else {"path": path}
        result: ImportedRecord = self._call("POST", "/api/library/import", json=body, timeout=None)
        return result

    def remotes(self) -> list[RemoteRecord]:
        """The remote endpoints: name, URL, their models as served here, whether a key is kept (never the key)."""
        result: list[RemoteRecord] = self._call("GET", "/api/remotes")
        return result

    def add_remote(self, name: str, url: str, api_key: str | None = None) -> RemoteRecord:
        """Register an OpenAI-compatible server elsewhere; it must list its models now (ControlError 502 if not)."""
        body = {"name": name, "url": url} | ({"api_key": api_key} if api_key else {})
        result: RemoteRecord = self._call("POST", "/api/remotes", json=body, timeout=30.0)
        return result

    def remove_remote(self, name: str) -> RemovedRecord:
        result: RemovedRecord = self._call("DELETE", f"/api/remotes/{name}")
        return result

    def series(
        self, window_s: int, names: list[str] | None = None, model: str | None = None, max_points: int | None = None
    ) -> SeriesAnswer:
        """Metric series over the last `window_s` seconds: {now, interval_s, sampler, series: [{name, labels, t, v}]}.

        Points are 1 s apart for windows up to an hour and minute averages beyond; `names` and `model` narrow it.
        """
        params: dict[str, str | int] = {"window": window_s}
        if names:
            params["names"] = ",".join(names)
        if model is not None:
            params["model"] = model
        if max_points is not None:
            params["max_points"] = max_points
        result: SeriesAnswer = self._call("GET", "/api/series", params=params)
        return result

    def requests(self, limit: int = 100) -> list[RequestRecord]:
        """The latest request records of the gateway, oldest first."""
        result: list[RequestRecord] = self._call("GET", "/api/requests", params={"limit": limit})
        return result

    # Settings and secrets ---------------------------------------------------------------------------------

    def settings(self) -> SettingsAnswer:
        """{settings, running, restart_required, problem, api_key: {present, source}, hf_token: {set, source},
        lan: {addresses, warning, port}}. Reads the keyring on the service's side, so allow it time."""
        result: SettingsAnswer = self._call("GET", "/api/settings", timeout=30.0)
        return result

    def update_settings(self, changes: Mapping[str, object], confirm_lan_exposure: bool = False) -> SavedSettingsAnswer:
        """Save some settings; the answer is `settings()`'s plus `changed`. A bad value is a ControlError (400);
        a non-loopback bind address needs `confirm_lan_exposure` and an endpoint with a key (409 otherwise)."""
        body = {**changes, "confirm_lan_exposure": True} if confirm_lan_exposure else dict(changes)
        result: SavedSettingsAnswer = self._call("PUT", "/api/settings", json=body, timeout=30.0)
        return result

    def regenerate_api_key(self) -> EndpointRecord:
        """A new API key for the endpoint, in use at once: the answer is `endpoint()`'s."""
        result: EndpointRecord = self._call("POST", "/api/key/regenerate", timeout=30.0)
        return result

    def set_hf_token(self, token: str) -> None:
        """Keep the Hugging Face token in the service machine's OS keyring. It is never sent back."""
        self._call("PUT", "/api/hf-token", json={"token": token}, timeout=30.0)

    def clear_hf_token(self) -> bool:
        """Remove the Hugging Face token; False when none was saved."""
        return bool(self._call("DELETE", "/api/hf-token", timeout=30.0)["removed"])

    # Benchmarks -----------------------------------------------------------------------------------------------

    def start_bench(
        self,
        model_id: str,
        concurrency: list[int],
        prompt_tokens: int,
        output_tokens: int,
        requests: int | None = None,
        **prompts: int | str | None,
    ) -> BenchRunRecord:
        """Start a benchmark on the service (one at a time); its progress comes as `bench` events. `prompts` are
        the other fields of POST /api/bench: prompt_mode, prefix_tokens, conversations, turns, seed (None: the
        service's default)."""
        body: dict[str, object] = {"model": model_id, "concurrency": concurrency, "prompt_tokens": prompt_tokens,
                                "output_tokens": output_tokens}  # fmt: skip
        if requests is not None:
            body["requests"] = requests
        body.update({name: value for name, value in prompts.items() if value is not None})
        result: BenchRunRecord = self._call("POST", "/api/bench", json=body)
        return result

    def bench(self) -> BenchListing:
        """{run: the running or last benchmark (None before the first), cards: saved cards, newest first}."""
        result: BenchListing = self._call("GET", "/api/bench", timeout=30.0)
        return result

    def cancel_bench(self) -> BenchRunRecord:
        result: BenchRunRecord = self._call("POST", "/api/bench/cancel", timeout=30.0)
        return result

    def bench_card(self, card_id: str) -> BenchCardRecord:
        result: BenchCardRecord = self._call("GET", f"/api/bench/cards/{_segment(card_id)}")
        return result

    def compare_bench_cards(self, first: str, second: str) -> list[list[str]]:
        """Two cards side by side as rows [what, first's value, second's value]."""
        result: list[list[str]] = self._call("GET", "/api/bench/compare", params={"a": first, "b": second})["rows"]
        return result

    def start_quality(self, model_id: str, **fields: Any) -> QualityRunRecord:
        """Start a quality run (one at a time); `fields`: variants, reference, data, tokens of POST /api/quality.
        Its progress comes as `quality` events."""
        body = {"model": model_id, **{name: value for name, value in fields.items() if value is not None}}
        result: QualityRunRecord = self._call("POST", "/api/quality", json=body)
        return result

    def quality(self) -> QualityListing:
        """{run: the running or last quality run (None before the first), cards: saved cards, newest first}."""
        result: QualityListing = self._call("GET", "/api/quality", timeout=30.0)
        return result

    def cancel_quality(self) -> QualityRunRecord:
        result: QualityRunRecord = self._call("POST", "/api/quality/cancel", timeout=30.0)
        return result

    def quality_card(self, card_id: str) -> QualityCardRecord:
        result: QualityCardRecord = self._call("GET", f"/api/quality/cards/{_segment(card_id)}")
        return result

    def compare_quality_cards(self, first: str, second: str) -> list[list[str]]:
        """Two quality cards side by side as rows [what, first's value, second's value]."""
        rows: list[list[str]] = self._call("GET", "/api/quality/compare", params={"a": first, "b": second})["rows"]
        return rows

    def start_engine_build(self, engine: str = "llama-server") -> EngineBuildRecord:
        """Build an engine on the service's machine (one build at a time: 409 while one runs). Its progress comes
        as `engine_build` events."""
        result: EngineBuildRecord = self._call("POST", f"/api/engines/{engine}/build")
        return result

    def engine_builds(self) -> EngineBuildListing:
        """{build: the running or last engine build, None before the first}."""
        result: EngineBuildListing = self._call("GET", "/api/engines/builds")
        return result

    def cancel_engine_build(self, engine: str = "llama-server") -> EngineBuildRecord:
        """Cancel the running build; it answers once the compiler is gone."""
        result: EngineBuildRecord = self._call("POST", f"/api/engines/{engine}/build/cancel", timeout=30.0)
        return result

    def shutdown(self) -> None:
        self._call("POST", "/api/shutdown")

    def events(self) -> EventStream:
        """Live events (a snapshot, then engine states and log lines) until the service goes away."""
        return EventStream(self.address)


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


def connect(paths: AppPaths) -> ControlClient | None:
    """A client of the running service, or None when no service answers."""
    address = find_service(paths)
    if address is None:
        return None
    client = ControlClient(address)
    try:
        client.health()
    except (ServiceUnavailable, ControlError):
        client.close()
        return None
    return client


@dataclass
class StartedService:
    """A service this client started; `process` is ours to stop, None when another process's service started first
    (ours then refused to start beside it)."""

    client: ControlClient
    process: subprocess.Popen[bytes] | None


def start_service(paths: AppPaths, port: int | None = None, timeout_s: float = START_TIMEOUT_S) -> StartedService:
    """Start `modeldeck serve` in the background and wait until its control API answers, or until the one that
    another process started at the same time answers. A service of the data folder that no longer answers but still
    holds the folder (stopping) is waited for first."""
    deadline = time.monotonic() + timeout_s
    other = _wait_for_the_folder(paths, deadline)
    if other is not None:
        return StartedService(other, None)
    paths.logs.mkdir(parents=True, exist_ok=True)
    command = [*modeldeck_command(), "serve"]
    if port is not None:
        command += ["--port", str(port)]
    with open(paths.logs / "service-stdout.log", "ab") as output:
        process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT, start_new_session=True,
            env=os.environ.copy(),
        )  # fmt: skip
    while time.monotonic() < deadline:
        exited = process.poll() is not None
        address = find_service(paths)
        if address is not None and (address.pid == process.pid or exited):
            client = connect(paths)
            if client is not None:
                return StartedService(client, process if client.address.pid == process.pid else None)
        if exited and not _service_claimed(paths):
            raise ServiceUnavailable(_last_lines(paths, f"The service exited with code {process.returncode}"))
        time.sleep(0.1)
    process.terminate()
    raise ServiceUnavailable(f"The service did not start within {timeout_s:.0f} s.")


def _wait_for_the_folder(paths: AppPaths, deadline: float) -> ControlClient | None:
    """None once no service holds the data folder; a client of the one that holds it if it comes to answer (it was
    starting). A service that is stopping holds the folder until its engines have stopped, which can take longer than
    a new one waits for it (CLAIM_WAIT_S in app.service.server): started meanwhile, ours would give up on the folder
    and the command fail, though the folder is free a moment later."""
    while _service_claimed(paths):
        client = connect(paths)
        if client is not None:
            return client
        if time.monotonic() >= deadline:
            raise ServiceUnavailable(
                "Another ModelDeck service of this data folder is still starting or stopping and does not answer: "
                "try again once it has stopped."
            )
        time.sleep(0.1)
    return None


def _service_claimed(paths: AppPaths) -> bool:
    """Whether a service holds the data folder (app.service.server claims it): starting, running or stopping."""
    if not paths.service_lock.exists():
        return False
    lock = FileLock(paths.service_lock, timeout=0, mode=0o600)
    try:
        lock.acquire()
    except Timeout:
        return True
    lock.release()
    return False


def _last_lines(paths: AppPaths, headline: str) -> str:
    try:
        lines = (paths.logs / "service-stdout.log").read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        lines = []
    return "\n".join([headline + ":", *lines[-8:]])


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
