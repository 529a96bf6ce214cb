"""`modeldeck vllm-env install|use|status`: vLLM in a virtual environment of its own (app/installs/vllm_env.py)."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from app.cli.invocation import Invocation
from app.cli.progress import ProgressBar
from app.paths import AppPaths
from app.task import Progress, Stopped, TaskState

COMMAND = "vllm-env"


def add_vllm_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from app.installs.vllm_env import DEFAULT_VERSION

    parser = commands.add_parser(COMMAND, help="install vLLM in its own environment, or use an existing one")
    actions = parser.add_subparsers(dest="vllm_action", required=True)
    install = actions.add_parser("install", help="create an environment for a vLLM version and pip-install it")
    install.add_argument("--version", default=DEFAULT_VERSION, help=f"the vLLM version ({DEFAULT_VERSION})")
    install.add_argument("--use", type=Path, metavar="PATH", help="instead, use the vLLM at PATH (see `use`)")
    use = actions.add_parser("use", help="use an existing vLLM: its `vllm` executable or its virtual environment")
    use.add_argument("path", type=Path, metavar="PATH")
    actions.add_parser("status", help="say which vLLM ModelDeck launches, and whether this machine can run it")
    parser.set_defaults(func=run_vllm_command)


def _gpu_problem() -> str | None:
    from app.hardware.nvidia import detect_nvidia
    from app.installs.vllm_gpu import vllm_gpu_problem

    return vllm_gpu_problem(detect_nvidia())


def _show_progress(bar: ProgressBar) -> Callable[[Progress], None]:
    """pip's steps as the progress line; the bar only while a file downloads (the total is that file's bytes)."""

    def show(progress: Progress) -> None:
        bar(progress if progress.current.startswith("downloading") else replace(progress, total=0))

    return show


def run_vllm_command(args: argparse.Namespace, invocation: Invocation) -> int:
    from app.installs.vllm_env import InstallError, env_dir, install_vllm, registered, use_existing

    paths = invocation.paths
    try:
        if args.vllm_action == "status":
            return _status(paths)
        path = args.path if args.vllm_action == "use" else args.use
        problem = _gpu_problem()
        if path is not None:
            install = use_existing(paths, path)
            print(f"ModelDeck now launches vLLM {install.version} at {install.executable}")
            if problem:
                print(f"note: {problem}: it will not start here.", file=sys.stderr)
            return 0
        if problem:
            print(f"modeldeck: {problem}. Nothing was installed.", file=sys.stderr)
            return 2
        print(f"Installing vLLM {args.version} into {env_dir(paths, args.version)} (several GB; Ctrl-C cancels)")
        task = TaskState(_show_progress(ProgressBar()), interval_s=1.0)
        try:
            install = install_vllm(paths, args.version, task)
        except KeyboardInterrupt:
            print("Cancelled: the new environment was removed; the vLLM in use is unchanged.", file=sys.stderr)
            return 130
        print(f"vLLM {install.version} is installed and verified: {install.executable}")
        return 0
    except Stopped as exc:
        print(f"modeldeck: {exc}", file=sys.stderr)
        return 130
    except InstallError as exc:
        current = None
        with contextlib.suppress(InstallError):  # a broken record is reported by `status`
            current = registered(paths)
        print(f"modeldeck: {exc}", file=sys.stderr)
        if current is not None:
            print(f"The vLLM in use is unchanged: {current.version} at {current.executable}", file=sys.stderr)
        return 2


def _status(paths: AppPaths) -> int:
    from app.installs.vllm_env import registered

    install = registered(paths)
    if install is None:
        print("No vLLM is registered: `modeldeck vllm-env install` or `modeldeck vllm-env use PATH`.")
    else:
        kind = "managed by ModelDeck" if install.managed else "yours"
        print(f"vLLM {install.version} at {install.executable} ({kind})")
    problem = _gpu_problem()
    print(problem or "This machine has an NVIDIA GPU vLLM can use.")
    return 0 if install is not None else 1
