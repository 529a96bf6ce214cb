"""`modeldeck quality`: what each variant of a model loses against the most precise one, measured on a text with
llama.cpp's llama-perplexity; `modeldeck quantize`: a new variant made with llama-quantize (and llama-imatrix on
the user's text). Both run here, without the service; the service runs `quality --progress-jsonl` as its child."""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from app.cli.cancellable import run_cancellable
from app.cli.hub import MODELS_DIR_HELP
from app.cli.invocation import Invocation
from app.cli.numbers import positive, whole_number
from app.paths import AppPaths
from app.quality.measure import MAX_TOKENS, MIN_TOKENS
from app.task import Stopped, TaskState

DEFAULT_TOKENS = 4096
T = TypeVar("T")


def add_quality_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    quality = commands.add_parser(
        "quality", help="measure what each quantized variant of a model loses (perplexity, KL divergence)"
    )
    quality.add_argument("model", nargs="?", metavar="MODEL", help="a model id from `modeldeck models`")
    quality.add_argument(
        "--variant", action="append", default=[], metavar="ID",
        help="measure this variant (repeatable; default: every variant of MODEL in the library)",
    )  # fmt: skip
    quality.add_argument(
        "--reference", metavar="VARIANT|FILE", help="compare with this variant (default: the most precise one)"
    )
    quality.add_argument("--data", type=Path, metavar="FILE", help="your own text, UTF-8 (default: Python's help text)")
    quality.add_argument("--tokens", type=whole_number(MIN_TOKENS, MAX_TOKENS), default=DEFAULT_TOKENS, metavar="N",
                         help="tokens to score (4096)")  # fmt: skip
    quality.add_argument("--threads", type=positive, metavar="N", help="CPU threads of the tool (default: all)")
    quality.add_argument("--models-dir", action="append", default=[], type=Path, metavar="DIR", help=MODELS_DIR_HELP)
    quality.add_argument("--json", action="store_true", help="print the quality card as JSON")
    quality.add_argument("--progress-jsonl", action="store_true", help="print progress as JSON lines (for the service)")
    quality.add_argument("--compare", nargs=2, metavar=("CARD_A", "CARD_B"), help="show two saved cards side by side")
    quantize = commands.add_parser("quantize", help="make a quantized variant of a model with llama-quantize")
    quantize.add_argument("model", metavar="MODEL", help="a model id from `modeldeck models`")
    quantize.add_argument("--to", required=True, metavar="TYPE", help="Q4_K_M, Q5_K_M, Q8_0, Q4_0, Q2_K, ...")
    quantize.add_argument(
        "--data", type=Path, metavar="FILE",
        help="your own text: an importance matrix computed from it keeps the weights that matter there",
    )  # fmt: skip
    quantize.add_argument("--threads", type=positive, metavar="N", help="CPU threads of the tools (default: all)")
    quality.set_defaults(func=run_quality_command)
    quantize.set_defaults(func=run_quality_command)


def run_quality_command(args: argparse.Namespace, invocation: Invocation) -> int:
    paths = invocation.paths
    return _quantize(args, paths) if args.command == "quantize" else _quality(args, paths)


def _fail(message: str, code: int = 2) -> int:
    print(f"modeldeck: {message}", file=sys.stderr)
    return code


def _served_elsewhere(
    paths: AppPaths, model_ids: list[str], models_dirs: tuple[Path, ...] = ()
) -> tuple[str, str] | None:
    """The first of `model_ids` that the library, all these commands read, lacks and that the running service (none
    is started) serves from a remote or an --upstream server, with what serves it, as the service names it."""
    from app.client import ControlError, ServiceUnavailable, connect
    from app.hub.library import known_models

    local = known_models(paths, models_dirs)
    elsewhere = [model_id for model_id in model_ids if model_id not in local]
    client = connect(paths) if elsewhere else None
    if client is None:
        return None
    try:
        records = {record["id"]: record for record in client.models()}
    except (ServiceUnavailable, ControlError):
        return None
    finally:
        client.close()
    for model_id in elsewhere:
        record = records.get(model_id)
        if record is not None and record["source"] == "remote":  # served as NAME/<its id there>
            return model_id, f"remote {model_id.partition('/')[0]}"
        if record is not None and record["source"] == "external":  # its path is the server's URL
            return model_id, f"the --upstream server at {record['path']}"
    return None


def _in_thread(work: Callable[[], T], state: TaskState) -> T:
    """Run `work` so that Ctrl-C here, or the service's SIGTERM when it cancels the run, cancels it: the tool is
    stopped and the scratch files (reference logits of hundreds of MB) removed, not orphaned."""
    return run_cancellable(work, state, "quality", sigterm_cancels=True)


def _quality(args: argparse.Namespace, paths: AppPaths) -> int:
    from app.card_files import CardSaveError, load_named
    from app.quality.card import compare, load_card, quality_dir, results_table
    from app.quality.measure import Layout, QualityError
    from app.quality.run import RunRequest, SetupError, not_local, prepare, run_quality
    from app.quality.text import TextError

    if args.compare:
        try:
            cards = load_named(args.compare, lambda reference: load_card(reference, quality_dir(paths)))
        except ValueError as exc:
            return _fail(str(exc))
        print(compare(*cards), end="")
        return 0
    if not args.model:
        return _fail("quality needs a MODEL (or --compare CARD_A CARD_B)")
    try:
        Layout.for_tokens(args.tokens)
        folders = tuple(folder.expanduser().resolve() for folder in args.models_dir)
        request = RunRequest(args.model, tuple(args.variant), args.reference, args.data, args.tokens, folders)
        setup = prepare(paths, request)
    except SetupError as exc:
        served = _served_elsewhere(paths, [args.model, *args.variant, *filter(None, [args.reference])], folders)
        return _fail(str(exc) if served is None else not_local(*served))
    except (QualityError, TextError) as exc:
        return _fail(str(exc))

    def progress(event: dict[str, Any]) -> None:
        if args.progress_jsonl:
            print(json.dumps(event), flush=True)
        elif not args.json and event["type"] == "step":
            print(f"[{event['index'] + 1}/{event['of']}] {event['variant']}: {event['what']}", file=sys.stderr)

    state = TaskState()
    if not args.progress_jsonl and not args.json:
        print(f"reference {setup.reference.id}; text: {setup.text.description}", file=sys.stderr)
    try:
        with tempfile.TemporaryDirectory(prefix="quality-", dir=paths.cache if paths.cache.is_dir() else None) as tmp:
            card = _in_thread(
                lambda: run_quality(paths, setup, Path(tmp), state, progress, threads=args.threads), state
            )
    except Stopped:
        return _fail("quality run cancelled", 130)
    except QualityError as exc:
        return _fail(str(exc), 1)
    try:
        json_path, md_path = card.save(quality_dir(paths))
    except CardSaveError as exc:
        if not args.progress_jsonl:  # the measurements are not lost with the card (the service has them as events)
            print(json.dumps(card.to_dict(), indent=2) if args.json else "\n".join(results_table(card.results)))
        return _fail(f"the quality run ended, but {exc}", 1)
    if args.progress_jsonl:
        progress({"type": "card", "id": card.id, "json": str(json_path), "markdown": str(md_path)})
    elif args.json:
        print(json.dumps(card.to_dict(), indent=2))
    else:
        print("\n".join([*results_table(card.results), "", f"Card: {md_path}", f"      {json_path}"]))
    return 0


def _quantize(args: argparse.Namespace, paths: AppPaths) -> int:
    from app.quality.family import checked, subject_of
    from app.quality.quantize import QuantizeError, checked_type, quantize
    from app.quality.run import SetupError, library_model, tools_or_fail
    from app.quality.text import TextError, user_text

    try:
        quantization = checked_type(args.to)
        spec = library_model(paths, args.model)
        source = checked(subject_of(spec))
        tools = tools_or_fail(paths)
        data = user_text(args.data).path if args.data is not None else None
    except SetupError as exc:
        served = _served_elsewhere(paths, [args.model])
        if served is not None:
            return _fail(f"{served[0]} is served by {served[1]}: quantize needs a local GGUF model")
        return _fail(str(exc))
    except (QuantizeError, TextError, ValueError) as exc:
        return _fail(str(exc))
    state = TaskState()
    started = datetime.datetime.now(datetime.UTC)
    print(f"quantizing {source.id} ({source.quantization or 'type unknown'}) to {quantization}"
          + (f" with an importance matrix from {args.data}" if data else ""), file=sys.stderr)  # fmt: skip
    try:
        made = _in_thread(
            lambda: quantize(tools, source, quantization, paths.models_dir, state, paths.logs / "quality",
                             data=data, threads=args.threads), state
        )  # fmt: skip
    except Stopped:
        return _fail("quantization cancelled", 130)
    except QuantizeError as exc:
        return _fail(str(exc), 1)
    seconds = (datetime.datetime.now(datetime.UTC) - started).total_seconds()
    from app.hub.library import model_id_from_filename

    print(f"made {made.path} in {seconds:.0f} s: model id {model_id_from_filename(made.path.name)}")
    return 0
