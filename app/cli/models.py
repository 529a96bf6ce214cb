"""`modeldeck start / stop / logs / rm`: one model's engine and files, through the service."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from app.api_types import ModelRecord
from app.cli.invocation import Invocation
from app.cli.numbers import positive, whole_number
from app.cli.service_link import running_service, service_on_demand
from app.client import ControlClient, ControlError, ServiceUnavailable
from app.paths import AppPaths

# Launch options of `start`, as the control API names them (POST /api/models/ID/start checks their bounds).
OVERRIDES = ("context", "gpu_layers", "threads", "engine", "parallel", "draft", "lookup")
SPECULATION = ("draft", "lookup")


def add_speculation_options(command: argparse.ArgumentParser) -> None:
    """Speculative decoding's two ways, as `start` and `run` take them."""
    command.add_argument("--draft", metavar="MODEL", help="a smaller model with the same vocabulary drafts tokens "
                         "for this one to check in batches (llama-server)")  # fmt: skip
    command.add_argument("--lookup", type=whole_number(0), metavar="N", help="prompt-lookup decoding: draft N "
                         "tokens a step from the prompt's own words (llama-cpp-python)")  # fmt: skip


def add_model_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    start = commands.add_parser("start", help="load a model and wait until it is ready (starts the service if needed)")
    start.add_argument("model", metavar="MODEL", help="a model id from `modeldeck models`")
    start.add_argument("--context", type=positive, metavar="N", help="context length in tokens (the plan's)")
    start.add_argument(
        "--gpu-layers", type=whole_number(0), metavar="N", help="layers offloaded to the GPU (the plan's)"
    )
    start.add_argument("--threads", type=positive, metavar="N", help="CPU threads of the engine (the plan's)")
    start.add_argument("--engine", metavar="ENGINE", help="llama-server or llama-cpp-python (the plan's)")
    start.add_argument("--parallel", type=positive, metavar="N", help="requests served at once (llama-server)")
    add_speculation_options(start)
    start.add_argument("--json", action="store_true", help="print the model's record as JSON")
    stop = commands.add_parser("stop", help="stop a model's engine, or every engine with --all")
    which = stop.add_mutually_exclusive_group(required=True)
    which.add_argument("model", nargs="?", metavar="MODEL")
    which.add_argument("--all", action="store_true", help="stop every running engine")
    logs = commands.add_parser("logs", help="print a model's engine log")
    logs.add_argument("model", metavar="MODEL")
    logs.add_argument("--tail", type=whole_number(0), default=200, metavar="N", help="the last N lines (200)")
    logs.add_argument("-f", "--follow", action="store_true", help="keep printing new lines until Ctrl-C")
    rm = commands.add_parser("rm", help="delete a downloaded or imported model's files (asks first)")
    rm.add_argument("model", metavar="MODEL")
    rm.add_argument("-y", "--yes", action="store_true", help="do not ask")
    for command in (start, stop, logs, rm):
        command.set_defaults(func=run_model_command)


def run_model_command(args: argparse.Namespace, invocation: Invocation) -> int:
    paths = invocation.paths
    if args.command == "start":
        return _start(args, paths)
    if args.command == "stop":
        return _stop(args, paths)
    if args.command == "logs":
        return _logs(args, paths)
    return _rm(args, paths)


def _start(args: argparse.Namespace, paths: AppPaths) -> int:
    overrides = {name: value for name in OVERRIDES if (value := getattr(args, name)) is not None}
    client = service_on_demand(paths)
    try:
        record = start_and_wait(client, args.model, overrides or None)
    finally:
        client.close()
    if args.json:
        print(json.dumps(record, indent=2))
    else:
        print(f"{record['id']} is ready: {launch_line(record)}")
    return 0


def start_and_wait(client: ControlClient, model_id: str, overrides: dict[str, Any] | None = None) -> ModelRecord:
    """Start a model and wait until it is ready; a failed load is a ControlError with the engine's reason."""
    record = client.start_model(model_id, wait=True, overrides=overrides)
    if record["state"] != "ready":
        diagnosis = record["diagnosis"]
        told = (diagnosis["summary"], diagnosis["advice"]) if diagnosis else ()
        reason = " ".join(filter(None, told)) or record["message"]
        lines = [line.strip() for line in (reason or "no reason given").strip().splitlines() if line.strip()]
        # One line: the headline, and where the engine's output follows it, its last line (the error, as a rule).
        said = lines[0] if len(lines) == 1 else f"{lines[0].rstrip(':')}: {lines[-1]}"
        raise ControlError(f"{model_id} did not load ({record['state']}): {said}")
    return record


def launch_line(record: ModelRecord) -> str:
    """`llama-server, context 2048, 4 threads, pid 1234` from a model's record."""
    plan = record["plan"]
    parts = [str(record.get("engine") or "-")]
    if plan is not None:
        parts += [f"context {plan['context']}", f"{plan['threads']} threads"]
        parts += [f"{plan['gpu_layers']} GPU layers"] if plan["gpu_layers"] else []
        parts.append(f"{plan['parallel']} at once")
        parts += [f"draft {plan['draft']}"] if plan.get("draft") else []
        parts += [f"prompt lookup {plan['lookup']} tokens"] if plan.get("lookup") else []
    if record.get("pid"):
        parts.append(f"pid {record['pid']}")
    return ", ".join(parts)


def _stop(args: argparse.Namespace, paths: AppPaths) -> int:
    client = running_service(paths)
    try:
        if args.all:
            running = [m["id"] for m in client.models() if m["state"] not in ("stopped", "failed")]
        else:
            running = [args.model]
        for model_id in running:
            record = client.stop_model(model_id)
            print(f"{model_id}: {record['state']}")
        if not running:
            print("No engines are running.")
    finally:
        client.close()
    return 0


def _logs(args: argparse.Namespace, paths: AppPaths) -> int:
    client = running_service(paths)
    try:
        if not args.follow:
            for line in client.logs(args.model, args.tail) if args.tail else []:
                print(line)
            return 0
        return _follow(client, args.model, args.tail)
    finally:
        client.close()


def _follow(client: ControlClient, model_id: str, tail: int) -> int:
    """The last `tail` lines, then each new one as the service publishes it, until Ctrl-C."""
    stream = client.events()
    try:
        for event in stream:
            if event["type"] == "snapshot":
                # Subscribed: the tail read now misses nothing the stream will not bring (a line logged between
                # the two may show twice, never not at all).
                if not any(m["id"] == model_id for m in event["models"]):
                    raise ControlError(f"Unknown model {model_id!r}.", 404)
                for line in client.logs(model_id, tail) if tail else []:
                    print(line, flush=True)
            elif event["type"] == "log" and event["model_id"] == model_id:
                print(event["line"], flush=True)
    except KeyboardInterrupt:
        return 0
    finally:
        stream.close()
    raise ServiceUnavailable("The service stopped.")


def _rm(args: argparse.Namespace, paths: AppPaths) -> int:
    client = service_on_demand(paths)
    try:
        entry = next((m for m in client.library()["models"] if m["id"] == args.model), None)
        if entry is None:
            raise ControlError(f"No model {args.model!r} in the library.", 404)
        if not entry["deletable"]:
            raise ControlError(f"{args.model} is not downloaded or imported by ModelDeck: it is not deleted.", 403)
        size = entry["size_on_disk"] / 2**20
        if not args.yes and not _confirm(f"Delete {args.model} ({size:,.0f} MiB at {entry['path']})? [y/N] "):
            print("Nothing deleted.")
            return 1
        client.delete_model(args.model)
    finally:
        client.close()
    print(f"Deleted {args.model} ({size:,.0f} MiB freed).")
    return 0


def _confirm(question: str) -> bool:
    print(question, end="", flush=True)
    answer = sys.stdin.readline()
    if not answer.endswith("\n"):
        print()  # end of input: the question's line still needs ending
    return answer.strip().lower() in ("y", "yes")
