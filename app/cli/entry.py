"""`modeldeck`: no subcommand opens the window; `serve` runs the service in the foreground.

Through the service (started on demand as the window starts it): run, start, rm, and import when one runs. Through
the running service only: stop, logs, status, ps, bench. Here, in this process, with no service needed: hw,
recommend, export, search, show, pull, hf-token, key, engines, vllm-env, completion, and models and import when
no service runs (the same library code the service uses).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import logging.handlers
import math
import os
import sys
import urllib.parse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.api_types import ModelState
from app.bench.levels import MAX_CONCURRENCY
from app.bench.prompts import DEFAULT_PROMPT_MODE, DEFAULT_TURNS, MAX_TURNS, PROMPT_MODES
from app.cli.chat import COMMAND as CHAT_COMMAND
from app.cli.chat import add_chat_command, run_chat
from app.cli.completion import add_completion_command, completion_script
from app.cli.engines import add_engine_commands, run_engines_command
from app.cli.export import add_export_command, run_export
from app.cli.hub import HUB_COMMANDS, MODELS_DIR_HELP, add_hub_commands, run_hub_command
from app.cli.models import COMMANDS as MODEL_COMMANDS
from app.cli.models import add_model_commands, run_model_command
from app.cli.numbers import positive, tcp_port, whole_number
from app.cli.quality import add_quality_commands, run_quality_command
from app.cli.sizes import size_argument
from app.cli.status import add_status_command, run_status
from app.cli.vllm import COMMAND as VLLM_COMMAND
from app.cli.vllm import add_vllm_commands, run_vllm_command
from app.client import ControlError, ServiceUnavailable, connect, port_from_env
from app.hub.library import known_models
from app.interrupt import exit_promptly_on_interrupt, exit_within, kill_descendants
from app.keys import load_api_key
from app.paths import AppPaths, app_paths, make_private_dirs
from app.planner.recommend import USES
from app.settings import MAX_LOSS_PCT, LoadedSettings, load_settings, origin_problem, with_models_dir
from app.version import provenance
from engines.logs import PrivateRotatingFileHandler

if TYPE_CHECKING:
    from app.bench.card import LevelResult


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


def _loss_percent(text: str) -> float:
    try:
        percent = float(text)
    except ValueError:
        percent = math.nan
    if not 0 <= percent <= MAX_LOSS_PCT:
        raise argparse.ArgumentTypeError(f"expected a percentage from 0 to {MAX_LOSS_PCT:g}, got {text!r}")
    return percent


class _PrintVersion(argparse.Action):
    """`--version`, asking git for the commit only when it is given."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_args: object, **_kwargs: object) -> None:
        print(provenance().line())
        parser.exit()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="modeldeck", description="Serve language models locally.")
    parser.add_argument("--version", action=_PrintVersion, help="print the version and the build's git commit")
    commands = parser.add_subparsers(dest="command")
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
    models = commands.add_parser("models", help="list the models ModelDeck can serve")
    models.add_argument("--models-dir", action="append", default=[], type=Path, metavar="DIR", help=MODELS_DIR_HELP)
    commands.add_parser("ps", help="list the running engines")
    add_status_command(commands)
    add_model_commands(commands)
    add_chat_command(commands)
    commands.add_parser("key", help="print the API key of the OpenAI endpoint")
    hw = commands.add_parser("hw", help="show this machine's CPU, memory and GPUs, and why a GPU cannot be used")
    hw.add_argument("--json", action="store_true", help="print the hardware profile as JSON")
    recommend = commands.add_parser("recommend", help="say which engine, quantization and settings fit a model here")
    recommend.add_argument("model", metavar="MODEL", help="a model id from `modeldeck models`, a GGUF file or a folder")
    recommend.add_argument("--use", choices=USES, default="chat", help="chat (default), serve or long-context")
    recommend.add_argument("--users", type=positive, metavar="N", help="concurrent users to serve (--use serve; 8)")
    recommend.add_argument("--hardware", type=Path, metavar="FILE", help="plan for a recorded `hw --json` profile")
    recommend.add_argument("--json", action="store_true", help="print the recommendation as JSON")
    recommend.add_argument(
        "--max-loss", type=_loss_percent, metavar="PCT",
        help="rank a variant whose measured perplexity increase passes PCT %% lower (settings: max_quality_loss_pct)",
    )  # fmt: skip
    add_hub_commands(commands)
    add_export_command(commands)
    add_vllm_commands(commands)
    add_engine_commands(commands)
    add_completion_command(commands)
    add_quality_commands(commands)
    bench = commands.add_parser("bench", help="measure a model's throughput and latency at rising concurrency")
    bench.add_argument("model", nargs="?", metavar="MODEL", help="a model id from `modeldeck models`")
    bench.add_argument("--concurrency", default="1,4,16,64", metavar="N,N,...", help="levels to sweep (1,4,16,64)")
    bench.add_argument("--prompt-tokens", type=positive, default=256, metavar="N",
                       help="prompt length in tokens, chat template included (256)")  # fmt: skip
    bench.add_argument(
        "--prompt-mode", choices=PROMPT_MODES, default=DEFAULT_PROMPT_MODE,
        help="unique: each request its own prompt (default); shared-prefix: the same first --prefix-tokens, then "
        "its own; multi-turn: --conversations taking --turns turns in order; identical: one prompt for all (this "
        "measures the engine's prompt cache)",
    )  # fmt: skip
    bench.add_argument(
        "--prefix-tokens", type=whole_number(0), default=0, metavar="N", help="shared-prefix: tokens shared"
    )
    bench.add_argument("--conversations", type=whole_number(1, MAX_CONCURRENCY), metavar="N",
                       help="multi-turn: per level (max(3, concurrency))")  # fmt: skip
    bench.add_argument("--turns", type=whole_number(2, MAX_TURNS), default=DEFAULT_TURNS, metavar="N",
                       help=f"multi-turn: turns per conversation ({DEFAULT_TURNS})")  # fmt: skip
    bench.add_argument("--seed", type=whole_number(0), default=0, metavar="N",
                       help="the prompts' seed: runs with one repeat (0)")  # fmt: skip
    bench.add_argument("--output-tokens", type=positive, default=128, metavar="N", help="tokens to generate (128)")
    bench.add_argument("--requests", type=positive, metavar="N", help="requests per level (max(8, 2 x concurrency))")
    bench.add_argument("--json", action="store_true", help="print the benchmark card as JSON")
    bench.add_argument(
        "--progress-jsonl", action="store_true",
        help="print one JSON line per step, request finished, level measured, and the card saved (for programs)",
    )  # fmt: skip
    bench.add_argument("--compare", nargs=2, metavar=("CARD_A", "CARD_B"), help="show two saved cards side by side")
    return parser


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


def _serve(args: argparse.Namespace, paths: AppPaths, loaded: LoadedSettings) -> int:
    from app.service.server import SHUTDOWN_DEADLINE_S, ServeOptions, Service, ServiceError

    settings = loaded.settings
    try:
        port = args.port if args.port is not None else port_from_env() or settings.gateway_port
    except ValueError as exc:
        print(f"modeldeck: {exc}", file=sys.stderr)
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


def _models(paths: AppPaths, models_dirs: Sequence[Path] = ()) -> int:
    client = connect(paths)
    if client is not None:
        try:
            records = client.models()
        finally:
            client.close()
        rows = [(m["id"], str(m["state"]), m["size_bytes"], m["path"]) for m in records]
        for folder in models_dirs:
            print(_folder_not_read(folder), file=sys.stderr)
    else:
        folders = tuple(folder.expanduser().resolve() for folder in models_dirs)
        rows = [(m.id, "stopped", m.size_bytes, str(m.path)) for m in known_models(paths, folders).values()]
    if not rows:
        print("No models. Install the bundled model with installers/run.sh.")
    for model_id, state, size, path in rows:
        print(f"{model_id:32} {state:11} {size / 1e6:8.1f} MB  {path}")
    return 0


def _folder_not_read(folder: Path) -> str:
    # The service scans the folders it was started with; one named to a client cannot join them while it runs.
    return (
        f"modeldeck: --models-dir {folder} is not read while the service runs: these are the service's models, from "
        f"the folders it was started with (to serve the models in {folder}, start it with `modeldeck serve "
        f"--models-dir {folder}`)"
    )


def _ps(paths: AppPaths) -> int:
    client = connect(paths)
    if client is None:
        print("The ModelDeck service is not running (start it with `modeldeck serve`).")
        return 1
    try:
        budget = client.health().get("memory_budget")
        models = client.models()
    finally:
        client.close()
    if budget is not None and (limit := budget.get("bytes")) is not None:
        print(f"Memory budget of the engines: {limit / 2**20:.0f} MiB ({budget['source']})")
    running = [m for m in models if m["state"] != ModelState.STOPPED]
    if not running:
        print("No engines are running.")
    for model in running:
        line = f"{model['id']:32} {model['state']:11} pid {model['pid'] or '-':>7}  port {model['port'] or '-':>5}"
        memory = model.get("memory")
        if memory:
            line += (
                f"  memory {memory['measured_at_load_bytes'] / 2**20:.0f} MiB at load, predicted "
                f"{memory['predicted_at_load_bytes'] / 2**20:.0f} ({memory['error_at_load']:+.1%}), "
                f"peak {memory['predicted_peak_bytes'] / 2**20:.0f} MiB"
            )
        print(line)
    return 0


def _key(paths: AppPaths) -> int:
    key = load_api_key(paths)
    if key.note:
        print(f"note: {key.note}", file=sys.stderr)
    print(key.value)
    return 0


def _hw(args: argparse.Namespace, paths: AppPaths) -> int:
    # Detection is local and read-only: it needs no service, and works when none is running.
    from app.hardware.detect import detect_hardware
    from app.hardware.summary import format_profile

    profile = detect_hardware(paths.models_dir, bandwidth_cache=paths.bandwidth_cache)
    print(profile.to_json() if args.json else format_profile(profile))
    return 0


def _recommend(args: argparse.Namespace, paths: AppPaths) -> int:
    from app.hardware.detect import detect_hardware
    from app.hardware.profile import HardwareProfile
    from app.planner.calibration import CalibrationStore
    from app.planner.plans import NoVariants, plan_model, resolve
    from app.planner.summary import summary_lines
    from engines.gguf import GGUFError

    try:
        model_id, variants = resolve(args.model, paths)
        hardware = (
            HardwareProfile.from_file(args.hardware)
            if args.hardware
            else detect_hardware(paths.models_dir, bandwidth_cache=paths.bandwidth_cache)
        )
    except (NoVariants, GGUFError, OSError, ValueError, KeyError, TypeError) as exc:
        print(f"modeldeck: {exc}", file=sys.stderr)
        return 2
    from app.installs.available import available_engines
    from app.planner.plans import detect_engines
    from app.quality.expected import quality_lookup

    engines = available_engines(paths)
    calibration = CalibrationStore(paths.calibration_db)
    result = plan_model(
        hardware,
        model_id,
        variants,
        args.use,
        args.users,
        calibration,
        engines,
        detect_engines(engines),
        *quality_lookup(paths, args.max_loss),
    )
    print(
        json.dumps({"model": model_id, **result.to_dict()}, indent=2)
        if args.json
        else "\n".join(summary_lines(model_id, result))
    )
    return 0 if result.best else 1


def _bench(args: argparse.Namespace, paths: AppPaths) -> int:
    from app.bench.card import compare, load_card, results_table, turns_table
    from app.bench.levels import parse_concurrency
    from app.bench.progress import CardSaved, LevelDone, SweepEvent, event_json
    from app.bench.sweep import SweepError, SweepOptions, level_line, run_sweep
    from app.card_files import CardSaveError, load_named

    if args.compare:
        try:
            cards = load_named(args.compare, lambda reference: load_card(reference, paths.bench_dir))
        except ValueError as exc:
            print(f"modeldeck: {exc}", file=sys.stderr)
            return 2
        print(compare(*cards), end="")
        return 0
    if not args.model:
        print("modeldeck: bench needs a MODEL (or --compare CARD_A CARD_B)", file=sys.stderr)
        return 2
    try:
        options = SweepOptions(parse_concurrency(args.concurrency), args.prompt_tokens, args.output_tokens,
                               args.requests, args.prompt_mode, args.seed, args.prefix_tokens, args.conversations,
                               args.turns)  # fmt: skip
    except ValueError as exc:
        print(f"modeldeck: {exc}", file=sys.stderr)
        return 2
    client = connect(paths)
    if client is None:
        print("The ModelDeck service is not running (start it with `modeldeck serve`).", file=sys.stderr)
        return 1

    measured: list[LevelResult] = []

    def progress(event: SweepEvent) -> None:
        if isinstance(event, LevelDone):
            measured.append(event.result)
        line = event_json(event) if args.progress_jsonl else None if args.json else level_line(event)
        if line is not None:
            print(line, flush=True)

    try:
        card = run_sweep(client, args.model, options, progress)
    except SweepError as exc:
        print(f"modeldeck: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        _print_interrupted(args, measured, len(options.concurrency))
        return 130
    finally:
        client.close()
    try:
        json_path, md_path = card.save(paths.bench_dir)
    except CardSaveError as exc:
        if args.json and not args.progress_jsonl:  # the measurements are not lost with the card
            print(json.dumps(card.to_dict(), indent=2))
        print(f"modeldeck: the benchmark ran, but {exc}", file=sys.stderr)
        return 1
    if args.progress_jsonl:
        progress(CardSaved(card.id, str(json_path), str(md_path)))
    elif args.json:
        print(json.dumps(card.to_dict(), indent=2))
    else:
        turns = turns_table(card.results)
        print("\n".join(["", *results_table(card.results), *(["", *turns] if turns else []), "",
                         f"Card: {md_path}", f"      {json_path}"]))  # fmt: skip
    return 0 if all(level.errors == 0 for level in card.results) else 1


def _print_interrupted(args: argparse.Namespace, measured: list[LevelResult], levels: int) -> None:
    """The levels a sweep stopped by Ctrl-C measured (as the card would have them), marked as interrupted; the
    card is not saved: its parameters say what was asked, and only part of it ran."""
    from dataclasses import asdict

    from app.bench.card import results_table, turns_table, with_gains

    measured = with_gains(measured)
    if args.json and not args.progress_jsonl:  # --progress-jsonl printed each level as it came
        print(
            json.dumps({"model": args.model, "interrupted": True, "results": [asdict(r) for r in measured]}, indent=2)
        )
    elif measured and not args.progress_jsonl:
        turns = turns_table(measured)
        print("\n".join(["", *results_table(measured), *(["", *turns] if turns else [])]))
    print(f"modeldeck: interrupted after {len(measured)} of {levels} levels: no card is saved", file=sys.stderr)


def _system_refusal(error: OSError) -> str:
    """One line for an OSError that reached the top: the path, what the system said, and what a file in the way
    of one of ModelDeck's folders means."""
    said = f"{error.filename}: {error.strerror}" if error.filename and error.strerror else str(error)
    if isinstance(error, (FileExistsError, NotADirectoryError)):
        said += " (a file is where ModelDeck needs a folder: move it aside)"
    return said


def main(argv: Sequence[str] | None = None) -> None:
    parser = _parser()
    args = parser.parse_args(argv)
    loaded = load_settings(app_paths())
    if loaded.problem:
        print(f"modeldeck: settings: {loaded.problem}", file=sys.stderr)
    paths = with_models_dir(app_paths(), loaded.settings)
    # The GUI has Qt's event loop, the service its own shutdown deadline, and in a chat Ctrl-C stops an answer only.
    if args.command not in (None, "serve", CHAT_COMMAND):
        exit_promptly_on_interrupt(on_force=kill_descendants)
    try:
        if args.command is None:
            from app.gui.shell.launch import run_gui

            code = run_gui(paths, loaded)
        elif args.command == "serve":
            code = _serve(args, paths, loaded)
        elif args.command == "hw":
            code = _hw(args, paths)
        elif args.command == "recommend":
            code = _recommend(args, paths)
        elif args.command in HUB_COMMANDS:
            code = run_hub_command(args, paths)
        elif args.command == "bench":
            code = _bench(args, paths)
        elif args.command == "models":
            code = _models(paths, args.models_dir)
        elif args.command == "export":
            code = run_export(args, paths)
        elif args.command == VLLM_COMMAND:
            code = run_vllm_command(args, paths)
        elif args.command == "engines":
            code = run_engines_command(args, paths)
        elif args.command in MODEL_COMMANDS:
            code = run_model_command(args, paths)
        elif args.command == CHAT_COMMAND:
            code = run_chat(args, paths)
        elif args.command == "status":
            code = run_status(args, paths)
        elif args.command == "completion":
            print(completion_script(parser, args.shell), end="")
            code = 0
        elif args.command in ("quality", "quantize"):
            code = run_quality_command(args, paths)
        else:
            code = {"models": _models, "ps": _ps, "key": _key}[args.command](paths)
        sys.stdout.flush()  # here, where a reader gone away is still caught below, not in Python's exit
    except BrokenPipeError:
        # The reader stopped reading (`modeldeck models | head -1`): what it wanted it has. Nothing more goes out,
        # so that Python's own flush at exit does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 1
    except (ServiceUnavailable, ControlError) as exc:
        print(f"modeldeck: {exc}", file=sys.stderr)
        code = 1
    except OSError as exc:  # the last resort: what the system refused, which no command can mend by itself
        print(f"modeldeck: {_system_refusal(exc)}", file=sys.stderr)
        code = 1
    except KeyboardInterrupt:
        code = 130
    sys.exit(code)
