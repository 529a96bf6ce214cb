"""`modeldeck serve`: the service in the foreground, its flags over the saved settings for this run; and `key`, the
API key of the OpenAI endpoint it serves."""

from __future__ import annotations

import argparse
import asyncio
import logging
import logging.handlers
import math
import os
import sys
import urllib.parse
from collections.abc import Callable
from pathlib import Path

from app.cli.hub import MODELS_DIR_HELP
from app.cli.invocation import Invocation
from app.cli.numbers import positive, tcp_port, whole_number
from app.cli.sizes import size_argument
from app.client import port_from_env
from app.interrupt import exit_within
from app.keys import load_api_key
from app.paths import AppPaths, make_private_dirs
from app.settings import origin_problem
from engines.logs import PrivateRotatingFileHandler


def _upstream(text: str) -> tuple[str, str]:
    model_id, _, url = text.partition("=")
    parsed = urllib.parse.urlsplit(url)
    if not model_id or parsed.scheme != "http" or parsed.hostname not in ("127.0.0.1", "localhost", "::1"):
        raise argparse.ArgumentTypeError(f"expected ID=http://127.0.0.1:PORT (a server on this machine), got {text!r}")
    try:
        port_number = parsed.port  # ValueError when it is not a number, or past 65535
    except ValueError:
        port_number = 0
    if port_number == 0:
        raise argparse.ArgumentTypeError(f"the port of {url!r} must be a number from 1 to 65535")
    return model_id, url


def _remote(text: str) -> tuple[str, str]:
    from app.service.remotes import RemoteError, checked_name, checked_url

    name, _, url = text.partition("=")
    try:
        return checked_name(name), checked_url(url)
    except RemoteError as exc:
        raise argparse.ArgumentTypeError(f"expected NAME=URL: {exc}") from None


def _cors_origin(text: str) -> str:
    problem = origin_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return text


def _on_off(text: str) -> bool:
    if text.lower() not in ("on", "off"):
        raise argparse.ArgumentTypeError(f"expected on or off, got {text!r}")
    return text.lower() == "on"


def _seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not seconds > 0 or math.isinf(seconds):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return seconds


def _model_ttl(text: str) -> tuple[str, float | None]:
    model_id, _, seconds = text.partition("=")
    if model_id and seconds == "never":
        return model_id, None
    try:
        if model_id:
            return model_id, _seconds(seconds)
    except argparse.ArgumentTypeError:
        pass
    raise argparse.ArgumentTypeError(f"expected ID=SECONDS (a positive number) or ID=never, got {text!r}")


def add_serve_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = commands.add_parser("serve", help="run the service in the foreground (headless)")
    # Unset flags take the saved settings (app.settings); a flag given overrides them for this run.
    serve.add_argument("--host", help="address of the OpenAI endpoint (settings; default 127.0.0.1)")
    serve.add_argument("--port", type=tcp_port, help="port of the OpenAI endpoint ($MODELDECK_PORT, settings; 8642)")
    serve.add_argument(
        "--control-port", type=whole_number(0, 65535), help="loopback port of the control API (settings; 0: any free)"
    )
    serve.add_argument("--model", action="append", default=[], metavar="ID", help="start this model (repeatable)")
    serve.add_argument(
        "--no-api-key", action="store_true", help="accept requests without a key (only on a loopback address)"
    )
    serve.add_argument("--idle-ttl", type=_seconds, metavar="SECONDS", help="stop engines unused for this long")
    serve.add_argument(
        "--model-ttl", action="append", default=[], type=_model_ttl, metavar="ID=SECONDS",
        help="idle TTL of one model, over --idle-ttl; ID=never keeps it loaded (repeatable)",
    )  # fmt: skip
    serve.add_argument(
        "--max-memory",
        type=size_argument(),
        metavar="SIZE",
        help="stop least recently used engines to stay under this (8G; default: the RAM and GPU memory free at start, "
        "less a margin)",
    )
    serve.add_argument(
        "--upstream", action="append", default=[], type=_upstream, metavar="ID=URL",
        help="serve an OpenAI-compatible server already running on this machine as model ID",
    )  # fmt: skip
    serve.add_argument(
        "--remote", action="append", default=[], type=_remote, metavar="NAME=URL",
        help="serve the models of an OpenAI-compatible server elsewhere as NAME/MODEL; its key, if it needs one, "
        "from $MODELDECK_REMOTE_KEY_<NAME> or the key store (repeatable)",
    )  # fmt: skip
    serve.add_argument(
        "--max-connections", type=positive, metavar="N",
        help="client connections the OpenAI endpoint keeps open; the longest idle one makes room (from the open-file "
        "limit, at most 4096)",
    )  # fmt: skip
    serve.add_argument(
        "--max-queue",
        type=whole_number(0),
        default=32,
        metavar="N",
        help="requests waiting per engine before 429 (32; 0: none wait)",
    )
    serve.add_argument(
        "--cors-origin", action="append", type=_cors_origin, metavar="ORIGIN",
        help="allow this web origin, such as http://localhost:3000 (settings)",
    )  # fmt: skip
    serve.add_argument(
        "--log-request-text", action="store_true",
        help="keep each request's prompt and completion text in the request log (off: measurements only)",
    )  # fmt: skip
    serve.add_argument("--models-dir", action="append", default=[], type=Path, metavar="DIR", help=MODELS_DIR_HELP)
    serve.add_argument(
        "--gateway-server", choices=("own", "uvicorn"), default=os.environ.get("MODELDECK_GATEWAY_SERVER", "own"),
        help="HTTP server of the OpenAI endpoint: ModelDeck's own (app/service/http/http_server.py), which enforces "
        "HTTP limits and relays streamed chunks in a callback, or uvicorn as a fallback "
        "($MODELDECK_GATEWAY_SERVER; own)",
    )  # fmt: skip
    serve.add_argument(
        "--tls", choices=("auto", "on", "off"), default="auto",
        help="HTTPS for the OpenAI endpoint: auto (default) when it listens beyond loopback, with a self-signed "
        "certificate made on first use (its fingerprint is in the log and Settings), on, or off",
    )  # fmt: skip
    serve.add_argument("--tls-cert", type=Path, metavar="PEM", help="serve HTTPS with this certificate (and --tls-key)")
    serve.add_argument("--tls-key", type=Path, metavar="PEM", help="the unencrypted private key of --tls-cert")
    serve.add_argument(
        "--slot-routing", type=_on_off, default=os.environ.get("MODELDECK_SLOT_ROUTING", "on"), metavar="on|off",
        help="send each conversation to the llama-server slot that holds its earlier turns, or leave the choice to "
        "llama-server ($MODELDECK_SLOT_ROUTING; on)",
    )  # fmt: skip
    serve.add_argument(
        "--ollama-port", type=tcp_port, metavar="PORT",
        help="also serve Ollama's API alone on 127.0.0.1:PORT (11434 is Ollama's), for tools that only know Ollama's "
        "address; it asks the endpoint's API key, as the endpoint does",
    )  # fmt: skip
    serve.add_argument(
        "--ollama-no-key", action="store_true",
        help="OPT-IN, LESS SAFE: --ollama-port asks no API key, as Ollama does: any program on this machine can use "
        "the models (web pages still cannot; the Host check stays)",
    )  # fmt: skip
    serve.set_defaults(func=_serve)


def add_key_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    key = commands.add_parser("key", help="print the API key of the OpenAI endpoint")
    key.set_defaults(func=_key)


def _setup_service_logging(paths: AppPaths) -> None:
    make_private_dirs(paths)
    formatter = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    to_file = PrivateRotatingFileHandler(paths.service_log, maxBytes=5_000_000, backupCount=3)
    to_stderr = logging.StreamHandler()
    for handler in (to_file, to_stderr):
        handler.setFormatter(formatter)
    root = logging.getLogger("modeldeck")
    root.setLevel(logging.INFO)
    root.addHandler(to_file)
    root.addHandler(to_stderr)


def _serve(args: argparse.Namespace, invocation: Invocation) -> int:
    from app.service.server import SHUTDOWN_DEADLINE_S, ServeOptions, Service, ServiceError

    paths, loaded = invocation.paths, invocation.loaded
    settings = loaded.settings
    try:
        port = args.port if args.port is not None else port_from_env() or settings.gateway_port
    except ValueError as exc:
        print(f"modeldeck: {exc}", file=sys.stderr)
        return 2
    if args.ollama_no_key and args.ollama_port is None:
        print("modeldeck: --ollama-no-key goes with --ollama-port PORT", file=sys.stderr)
        return 2
    _setup_service_logging(paths)
    options = ServeOptions(
        args.host if args.host is not None else settings.bind_address,
        port,
        control_port=args.control_port if args.control_port is not None else settings.control_port,
        models=tuple(dict.fromkeys(args.model)),
        require_api_key=not args.no_api_key,
        idle_ttl_s=args.idle_ttl if args.idle_ttl is not None else settings.idle_ttl_s,
        max_loaded_bytes=args.max_memory,
        cors_origins=tuple(args.cors_origin) if args.cors_origin else settings.cors_origins,
        upstreams=tuple(args.upstream),
        max_waiting=args.max_queue,
        model_ttls=tuple(dict(args.model_ttl).items()),
        log_request_text=args.log_request_text,
        models_dirs=tuple(folder.expanduser().resolve() for folder in args.models_dir),
        remotes=tuple(dict(args.remote).items()),
        settings_problem=loaded.problem,
        gateway_server=args.gateway_server,
        tls=args.tls,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        max_connections=args.max_connections,
        slot_routing=args.slot_routing,
        ollama_port=args.ollama_port,
        ollama_keyless=args.ollama_no_key,
    )
    loop_factory: Callable[[], asyncio.AbstractEventLoop]
    try:
        import uvloop

        loop_factory = uvloop.new_event_loop
    except ImportError:  # Windows
        loop_factory = asyncio.new_event_loop
    try:
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            runner.run(Service(options, paths).run())
    except ServiceError as exc:
        print(f"modeldeck: {exc}", file=sys.stderr)
        return 2
    exit_within(SHUTDOWN_DEADLINE_S)  # every engine is stopped and every file kept: nothing left to wait for
    return 0


def _key(_args: argparse.Namespace, invocation: Invocation) -> int:
    key = load_api_key(invocation.paths)
    if key.note:
        print(f"note: {key.note}", file=sys.stderr)
    print(key.value)
    return 0
