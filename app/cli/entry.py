"""`modeldeck`: no subcommand opens the window; `serve` runs the service in the foreground.

Through the service (started on demand as the window starts it): run, start, rm, and import when one runs. Through
the running service only: stop, logs, status, ps, bench. Here, in this process, with no service needed: hw,
recommend, export, search, show, pull, hf-token, key, engines, vllm-env, completion, and models and import when
no service runs (the same library code the service uses).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

from app.cli.bench import add_bench_command
from app.cli.chat import COMMAND as CHAT_COMMAND
from app.cli.chat import add_chat_command
from app.cli.completion import add_completion_command
from app.cli.engines import add_engine_commands
from app.cli.export import add_export_command
from app.cli.hub import add_hub_commands
from app.cli.invocation import Handler, Invocation
from app.cli.listing import add_listing_commands
from app.cli.models import add_model_commands
from app.cli.planning import add_planning_commands
from app.cli.quality import add_quality_commands
from app.cli.serve import add_key_command, add_serve_command
from app.cli.status import add_status_command
from app.cli.vllm import add_vllm_commands
from app.client import ControlError, ServiceUnavailable
from app.interrupt import exit_promptly_on_interrupt, kill_descendants
from app.paths import app_paths
from app.settings import load_settings, with_models_dir
from app.version import provenance


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
    parser.set_defaults(func=_open_window)
    commands = parser.add_subparsers(dest="command")
    add_serve_command(commands)
    add_listing_commands(commands)
    add_status_command(commands)
    add_model_commands(commands)
    add_chat_command(commands)
    add_key_command(commands)
    add_planning_commands(commands)
    add_hub_commands(commands)
    add_export_command(commands)
    add_vllm_commands(commands)
    add_engine_commands(commands)
    add_completion_command(commands)
    add_quality_commands(commands)
    add_bench_command(commands)
    return parser


def _open_window(_args: argparse.Namespace, invocation: Invocation) -> int:
    from app.gui.shell.launch import run_gui

    return run_gui(invocation.paths, invocation.loaded)


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
        handler: Handler = args.func
        code = handler(args, Invocation(paths, loaded, parser))
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
