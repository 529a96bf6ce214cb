"""Wiring of the service: listeners, engines, discovery file, and an orderly shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
import os
import secrets
import signal
import socket
import sys
import threading
import time
from dataclasses import astuple, dataclass
from pathlib import Path
from typing import Any

import aiohttp

from app.hardware.detect import detect_hardware
from app.hub.cache import default_cache_dir
from app.hub.library import ModelSpec, external_model, known_models
from app.installs.available import available_engines
from app.interrupt import kill_descendants
from app.keys import ApiKey, load_api_key
from app.paths import AppPaths, make_private_dirs, make_private_file
from app.service.control.advisor import Advisor
from app.service.control.bench_routes import BenchRoutes
from app.service.control.control import ControlApi, EndpointInfo
from app.service.control.engine_routes import EngineRoutes
from app.service.control.hub_routes import HubRoutes, hub_endpoint
from app.service.control.model_settings_routes import ModelSettingsRoutes
from app.service.control.quality_routes import QualityRoutes
from app.service.control.remote_routes import RemoteRoutes
from app.service.control.settings_routes import RunningValues, SettingsRoutes
from app.service.data_folder import FolderHeld, claim_data_folder, withdraw_discovery
from app.service.dialects.ollama_listener import ollama_app, ollama_server
from app.service.dialects.response_store import ResponseStore
from app.service.dialects.serving import serve_dialects
from app.service.engines import EngineManager
from app.service.events import EventBus
from app.service.gateway.gateway import Gateway, GatewayConfig
from app.service.gateway.upstream import UpstreamPool
from app.service.heap import settle_heap
from app.service.http.asgi import LOOPBACK_HOSTS
from app.service.http.connection_cap import connection_caps, raise_open_file_limit
from app.service.http.lan import allowed_hosts
from app.service.http.tls import TlsError, TlsIdentity, endpoint_identity
from app.service.jobs.bench_runs import BenchRuns
from app.service.jobs.engine_builds import EngineBuilds
from app.service.jobs.quality_runs import QualityRuns
from app.service.launch.lifecycle import LifecyclePolicy
from app.service.launch.memory_budget import configured_budget, default_budget
from app.service.listeners import Listener, gateway_listener, log_tls, uvicorn_listener
from app.service.metrics.metrics_pipeline import MetricsPipeline
from app.service.metrics.request_log import RequestLog
from app.service.metrics.series_history import SeriesHistory
from app.service.remotes import RemoteRegistry
from app.settings import is_loopback_address
from engines.atomic_files import write_atomically
from engines.processes import reap_leftover_engines
from engines.states import EngineState
from engines.supervisor import SupervisorPolicy

log = logging.getLogger("modeldeck.service")
SHUTDOWN_DEADLINE_S = 1.8  # from Ctrl-C to the end of the process, whatever the stop waits on
_STOP_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)  # no SIGHUP on Windows


class ServiceError(Exception):
    """The service cannot start; the message says why and what to do."""


@dataclass(frozen=True)
class ServeOptions:
    host: str = "127.0.0.1"
    port: int = 8642
    control_port: int = 0  # 0: any free loopback port, published in the discovery file
    models: tuple[str, ...] = ()
    require_api_key: bool = True
    idle_ttl_s: float | None = None
    max_loaded_bytes: int | None = None
    cors_origins: tuple[str, ...] = ()
    upstreams: tuple[tuple[str, str], ...] = ()  # (model id, base URL) of external servers
    max_waiting: int = 32
    model_ttls: tuple[tuple[str, float | None], ...] = ()  # (model id, idle TTL; None: never) over idle_ttl_s
    log_request_text: bool = False  # keep prompts and completions in the request log
    models_dirs: tuple[Path, ...] = ()  # the user's models folders, scanned besides ModelDeck's own
    remotes: tuple[tuple[str, str], ...] = ()  # (name, base URL) of remote OpenAI-compatible servers
    settings_problem: str | None = None  # why the settings file could not be used, when it could not
    # app.service.http.http_server, or "uvicorn" (see docs/PERFORMANCE.md, "What the gateway costs")
    gateway_server: str = "own"
    tls: str = "auto"  # "auto": HTTPS when the endpoint listens beyond loopback; "on"; "off" (app.service.http.tls)
    tls_cert: Path | None = None  # the user's certificate and key; None: ModelDeck's own, made on first use
    tls_key: Path | None = None
    max_connections: int | None = None  # on the OpenAI endpoint; None: from the open-file limit (connection_cap)
    slot_routing: bool = True  # conversations to the llama-server slot holding their prefix (gateway.slot_router)
    ollama_port: int | None = None  # a loopback listener of Ollama's API alone (app.service.dialects.ollama_listener)
    ollama_keyless: bool = False  # the user's explicit choice: that listener asks no key


def bind_socket(
    host: str, port: int, what: str, choose: str = "modeldeck serve --port N, or MODELDECK_PORT=N"
) -> socket.socket:
    """Bind a listening socket now, so that a taken port is a clear error before anything starts; `choose` says
    how to choose another port for it."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise ServiceError(
                f"Port {port} on {host} is already in use, so the {what} cannot start. Stop the program using "
                f"it, or choose another port ({choose})."
            ) from exc
        raise ServiceError(f"Cannot listen on {host}:{port} for the {what}: {exc.strerror or exc}") from exc
    sock.listen(2048)
    sock.setblocking(False)
    return sock


class Service:
    """One running service. `run()` returns after a signal or a shutdown request, with every engine stopped."""

    def __init__(self, options: ServeOptions, paths: AppPaths, policy: SupervisorPolicy | None = None) -> None:
        self.options = options
        self.paths = paths
        self._policy = policy
        self._stop = asyncio.Event()
        self._stopped = threading.Event()  # the orderly stop is over
        self._signalled_at = 0.0
        self._request_log: RequestLog | None = None  # flushed by a stop forced before its orderly close

    def request_stop(self) -> None:
        self._stop.set()

    def _on_signal(self, sig: signal.Signals) -> None:
        """SIGTERM and SIGHUP (its terminal closed): an orderly stop, as long as it takes. Ctrl-C: the same, but over
        within SHUTDOWN_DEADLINE_S; a second Ctrl-C, or the deadline, ends the process at once (the engines die with
        it: _exec_wrapper.py), with the request log written first."""
        if sig != signal.SIGINT:
            self.request_stop()
            return
        if self._signalled_at:
            self._force_exit(sig)
        self._signalled_at = time.monotonic()
        self.request_stop()
        threading.Thread(target=self._deadline, args=(sig,), name="shutdown-deadline", daemon=True).start()

    def _deadline(self, sig: signal.Signals) -> None:
        if not self._stopped.wait(SHUTDOWN_DEADLINE_S):
            log.error("the orderly stop took over %.1f s; ending now", SHUTDOWN_DEADLINE_S)
            self._force_exit(sig)
        # Stopped in time; what is left is the interpreter's own exit (thread pools joined, modules torn down),
        # which has nothing more to save: it gets until the deadline too.
        time.sleep(max(0.0, SHUTDOWN_DEADLINE_S - (time.monotonic() - self._signalled_at)))
        self._force_exit(sig, code=0)

    def _force_exit(self, sig: signal.Signals, code: int | None = None) -> None:
        if code is None:
            kill_descendants()
            withdraw_discovery(self.paths)
            if self._request_log is not None:
                self._request_log.flush(0.3)  # a few ms of SQLite; the deadline must still hold
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(128 + sig if code is None else code)

    async def run(self) -> None:
        make_private_dirs(self.paths)
        try:
            claim = claim_data_folder(self.paths)
        except FolderHeld as held:
            raise ServiceError(str(held)) from None
        try:
            await self._run()
        finally:
            claim.release()

    async def _run(self) -> None:
        options, paths = self.options, self.paths
        for database in (paths.requests_db, paths.metrics_db, paths.calibration_db, paths.responses_db):
            make_private_file(database)
        models = known_models(paths, options.models_dirs) | {
            model_id: external_model(model_id, url) for model_id, url in options.upstreams
        }
        unknown = [m for m in (*options.models, *(m for m, _ in options.model_ttls)) if m not in models]
        if unknown:
            raise ServiceError(f"Unknown model {', '.join(unknown)}. Known models: {', '.join(models) or 'none'}.")
        upstream_ttls = [m for m, _ in options.model_ttls if models[m].url is not None]
        if upstream_ttls:
            raise ServiceError(
                f"--model-ttl {', '.join(upstream_ttls)}: an --upstream model is not started or stopped by ModelDeck, "
                "so it has no idle TTL."
            )
        if not options.require_api_key and not is_loopback_address(options.host):
            raise ServiceError(
                f"Refusing to listen on {options.host} without an API key: anyone on the network could use it. "
                "Drop --no-api-key, or bind to 127.0.0.1."
            )
        api_key = load_api_key(paths) if options.require_api_key else None
        tls = await asyncio.to_thread(self._tls_identity)
        for record in await asyncio.to_thread(reap_leftover_engines, paths.engine_records):
            log.warning("stopped engine pid %s (%s) left behind by an earlier run", record.pid, record.model_id)
        gateway_sock = bind_socket(options.host, options.port, "OpenAI endpoint")
        bound, loopback = [gateway_sock], "127.0.0.1"
        try:
            bound.append(bind_socket(loopback, options.control_port, "control API", "modeldeck serve --control-port N"))
            if options.ollama_port is not None:
                bound.append(
                    bind_socket(loopback, options.ollama_port, "Ollama API", "modeldeck serve --ollama-port N")
                )
        except ServiceError:
            for sock in bound:
                sock.close()
            raise
        await self._serve(models, api_key, gateway_sock, bound[1], tls, bound[2] if len(bound) > 2 else None)

    def _tls_identity(self) -> TlsIdentity | None:
        """The endpoint's certificate, checked now: a bad one is a clear error before anything listens."""
        options = self.options
        loopback = is_loopback_address(options.host)
        hosts = {options.host, *(LOOPBACK_HOSTS if loopback else allowed_hosts(options.host))}
        try:
            tls = endpoint_identity(options.tls, loopback, hosts, self.paths.tls_dir, options.tls_cert, options.tls_key)
            if tls is not None:
                tls.server_context()  # the pair loads in OpenSSL too, as both HTTP servers will load it
        except TlsError as exc:
            raise ServiceError(str(exc)) from exc
        if tls is None and not loopback:
            log.warning("TLS is off on %s: the API key crosses the network in clear", options.host)
        return tls

    async def _serve(self, models: dict[str, ModelSpec], api_key: ApiKey | None, gateway_sock: socket.socket,
                     control_sock: socket.socket, tls: TlsIdentity | None = None,
                     ollama_sock: socket.socket | None = None) -> None:  # fmt: skip
        options, paths = self.options, self.paths
        bus = EventBus()
        budget = (
            configured_budget(options.max_loaded_bytes)
            if options.max_loaded_bytes is not None
            else default_budget(await asyncio.to_thread(detect_hardware, paths.models_dir))
        )
        log.info("memory budget of the engines: %s MiB (%s)", (budget.bytes or 0) >> 20, budget.source)
        lifecycle = LifecyclePolicy(
            options.idle_ttl_s, budget.bytes, options.max_waiting, dict(options.model_ttls), budget.source
        )
        manager = EngineManager(models, paths, bus, self._policy, lifecycle, available_engines(paths))
        await manager.planner.detect_engines()  # /api/models and the gateway name the engine a start would choose
        request_log = self._request_log = RequestLog(paths.requests_db, bus)
        gateway_port = gateway_sock.getsockname()[1]
        control_port = control_sock.getsockname()[1]
        shown_host = f"[{options.host}]" if ":" in options.host else options.host
        url = f"{'https' if tls else 'http'}://{shown_host}:{gateway_port}/v1"
        key_value = api_key.value if api_key else None
        tls_info = tls.describe() if tls else None
        endpoint = EndpointInfo(
            url, key_value, api_key.source if api_key else "none", api_key.note if api_key else "", tls_info
        )
        token = secrets.token_urlsafe(32)
        allowed = LOOPBACK_HOSTS if is_loopback_address(options.host) else allowed_hosts(options.host)
        pool = UpstreamPool()
        # Engines' own /metrics are scraped once a second: off the hot path, so aiohttp is fine there.
        scrape_session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5))
        gateway_config = GatewayConfig(key_value, allowed, frozenset(options.cors_origins),
                                       log_request_text=options.log_request_text,
                                       slot_routing=options.slot_routing)  # fmt: skip
        gateway = Gateway(manager, gateway_config, pool, request_log)
        responses = ResponseStore(paths.responses_db)
        serve_dialects(gateway, manager, gateway_config.max_body_bytes, responses)
        ollama = ollama_app(gateway.openai, manager, key_value, options.ollama_keyless, gateway_config.max_body_bytes)
        advisor = Advisor(paths)
        downloads_dir = options.models_dirs[0] if options.models_dirs else None  # the first --models-dir
        hub = HubRoutes(manager, bus, advisor, paths, default_cache_dir(), hub_endpoint(), downloads_dir)
        metrics = MetricsPipeline(manager, bus, request_log, scrape_session, SeriesHistory(paths.metrics_db))
        remotes = RemoteRegistry(manager, paths, scrape_session)
        await remotes.start(options.remotes)
        running = RunningValues(
            gateway_port, control_port, options.control_port, options.host, options.cors_origins, options.idle_ttl_s,
            str(paths.models_dir),
        )  # fmt: skip

        def use_key(fresh: ApiKey) -> dict[str, Any]:
            gateway.set_api_key(fresh.value)
            ollama.set_api_key(fresh.value)
            info = EndpointInfo(url, fresh.value, fresh.source, fresh.note, tls_info)
            control.set_endpoint(info)
            log.info("the API key was replaced (kept in: %s)", fresh.source)
            return dict(info.__dict__)

        def engines_built() -> None:
            advisor.forget_installations()
            manager.planner.engines_changed()

        settings = SettingsRoutes(paths, running, api_key, use_key, options.settings_problem)
        bench = BenchRoutes(BenchRuns(bus, paths.bench_dir), manager.models.keys())
        quality = QualityRoutes(
            QualityRuns(bus, paths, manager.served_elsewhere, options.models_dirs), manager.models.keys()
        )
        # The CLI's destination and sdist cache: a build made here is the one `modeldeck engines` lists.
        builds = EngineRoutes(EngineBuilds(bus, paths.engine_builds, paths.cache / "sdists", engines_built))
        control = ControlApi(
            manager,
            bus,
            token,
            endpoint,
            self.request_stop,
            request_log,
            advisor,
            hub,
            metrics,
            RemoteRoutes(remotes),
            settings,
            bench,
            ModelSettingsRoutes(manager, advisor),
            quality,
            builds,
        )
        caps = connection_caps(raise_open_file_limit(), options.max_connections)
        log.info("connections kept open at most: %s on the OpenAI endpoint, %s on the control API", *astuple(caps))
        servers: list[tuple[Listener, socket.socket]] = [
            (gateway_listener(gateway, options.gateway_server, gateway_config.max_body_bytes, caps.gateway, tls),
             gateway_sock),
            (uvicorn_listener(control, caps.control), control_sock),
        ]  # fmt: skip
        if ollama_sock is not None:
            servers.append((ollama_server(ollama, gateway_config.max_body_bytes, caps.gateway), ollama_sock))
        loop = asyncio.get_running_loop()
        for sig in _STOP_SIGNALS:
            loop.add_signal_handler(sig, self._on_signal, sig)
        tasks = [asyncio.create_task(server.serve_socket(sock)) for server, sock in servers]
        preloads: list[asyncio.Task[None]] = [
            asyncio.create_task(manager.stop_idle_engines()),
            asyncio.create_task(remotes.refresh_forever()),
        ]
        try:
            while not all(server.started for server, _ in servers):
                if any(task.done() for task in tasks):
                    raise ServiceError("a listener failed to start; see the service log")
                await asyncio.sleep(0.01)
            write_atomically(paths.control_token_file, token + "\n")
            write_atomically(paths.service_file, json.dumps({
                "pid": os.getpid(), "url": url, "control_url": f"http://127.0.0.1:{control_port}",
                "started": time.time(),
            }))  # fmt: skip
            log.info("OpenAI endpoint on %s (API key: %s)", url, endpoint.key_source)
            if ollama_sock is not None:
                log.info("Ollama's API alone on http://127.0.0.1:%d (API key: %s)", ollama_sock.getsockname()[1],
                         "none" if options.ollama_keyless or not key_value else "the endpoint's")  # fmt: skip
            if tls:
                log_tls(tls)
            if options.settings_problem:
                log.warning("settings: %s", options.settings_problem)
            if endpoint.key_note:
                log.warning("API key: %s", endpoint.key_note)
            preloads += [asyncio.create_task(self._start_model(manager, model_id)) for model_id in options.models]
            await metrics.start()
            log.debug("%d start-up objects out of the garbage collector's walks", settle_heap())
            await self._stop.wait()
        finally:
            log.info("stopping")
            for server, _ in servers:
                server.stop()
            for preload in preloads:
                preload.cancel()
            await hub.downloads.pause_all()  # partial files stay for the next run to resume
            await bench.runs.stop()  # before the engines: its requests end first
            await quality.runs.stop()
            await builds.builds.stop()  # cmake's process group goes with the service
            await metrics.stop()
            await manager.stop_all()
            await asyncio.gather(*tasks, return_exceptions=True)
            pool.close()
            await gateway.close()
            await scrape_session.close()
            await asyncio.to_thread(request_log.close)
            await asyncio.to_thread(responses.close)
            for sig in _STOP_SIGNALS:
                loop.remove_signal_handler(sig)
            withdraw_discovery(paths)
            self._stopped.set()

    async def _start_model(self, manager: EngineManager, model_id: str) -> None:
        state = await manager.start(model_id)
        if state == EngineState.READY:
            log.info("%s is ready", model_id)
        else:
            log.error("%s failed to start: %s", model_id, manager.describe(model_id)["message"])
