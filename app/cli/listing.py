"""`modeldeck models` and `modeldeck ps`: the models ModelDeck can serve (the running service's, else the library's
read here), and the engines running."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from app.api_types import ModelState
from app.cli.hub import MODELS_DIR_HELP
from app.cli.invocation import Invocation
from app.client import connect
from app.hub.library import known_models


def add_listing_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    models = commands.add_parser("models", help="list the models ModelDeck can serve")
    models.add_argument("--models-dir", action="append", default=[], type=Path, metavar="DIR", help=MODELS_DIR_HELP)
    models.set_defaults(func=_models)
    ps = commands.add_parser("ps", help="list the running engines")
    ps.set_defaults(func=_ps)


def _models(args: argparse.Namespace, invocation: Invocation) -> int:
    paths, models_dirs = invocation.paths, args.models_dir
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


def _ps(_args: argparse.Namespace, invocation: Invocation) -> int:
    client = connect(invocation.paths)
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
