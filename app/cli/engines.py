"""`modeldeck engines`: which engines this machine can run and where they are; `modeldeck engines build llama-server`
builds llama.cpp's native server from the sources in llama-cpp-python's sdist, with a progress bar."""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path

from app.cli.progress import ProgressBar
from app.hub.task import Stopped, TaskState
from app.paths import AppPaths


def add_engine_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    engines = commands.add_parser("engines", help="list the inference engines, which are installed and where")
    actions = engines.add_subparsers(dest="engines_action")
    build = actions.add_parser("build", help="build an engine from source (llama-server: about 6 min on 2 cores)")
    build.add_argument(
        "engine", choices=("llama-server", "llama-tools", "llama-perplexity", "llama-quantize", "llama-imatrix"),
        help="llama-tools (or any one of its three): llama-perplexity, llama-quantize and llama-imatrix in one build",
    )  # fmt: skip
    build.add_argument("--source", type=Path, metavar="SDIST", help="llama-cpp-python's sdist (default: pip download)")
    build.add_argument("--dest", type=Path, metavar="DIR", help="where builds go (default: ModelDeck's engine builds)")
    build.add_argument("--backend", choices=("cpu", "cuda", "metal"), help="default: what this machine's tools allow")
    build.add_argument("--jobs", type=int, metavar="N", help="parallel compile jobs (default: all cores)")
    build.add_argument(
        "--portable", action="store_true",
        help="run on any CPU of this architecture: one CPU library per instruction-set level, the best loaded at "
        "start (what packages ship; several times longer to build)",
    )  # fmt: skip


def run_engines_command(args: argparse.Namespace, paths: AppPaths) -> int:
    if args.engines_action == "build":
        return _build(args, paths)
    return _list(paths)


def _list(paths: AppPaths) -> int:
    from app.installs.available import LLAMA_SERVER_ENV, available_engines
    from app.installs.llama_tools_build import find_tools
    from app.version import provenance
    from engines.llama_server import installed_builds

    print(f"{provenance().line()}\n")
    for name, engine in available_engines(paths).items():
        if name == "external":
            continue
        installation = engine.detect()
        print(f"{name:18} {'installed' if installation.installed else 'not installed':14} {installation.detail}")
    builds = installed_builds(paths.engine_builds)
    print(f"\nllama-server builds in {paths.engine_builds}: {len(builds) or 'none'}")
    for build in builds:
        print(f"  {build.version:10} {build.backend:6} {build.executable}")
    print(f"(${LLAMA_SERVER_ENV} points ModelDeck at a llama-server of your own; PATH is searched last.)")
    tools = find_tools(paths.engine_builds)
    print(f"quality tools (llama-perplexity, llama-quantize, llama-imatrix): {tools.folder if tools else 'not built'}")
    return 0


def _build(args: argparse.Namespace, paths: AppPaths) -> int:
    from app.installs.llama_server_build import (
        PINNED_VERSION,
        BuildError,
        build_llama_server,
        detect_backend,
        fetch_sdist,
    )
    from app.installs.llama_tools_build import build_llama_tools

    backend = args.backend
    if backend is None:
        backend, why = detect_backend()
        print(f"backend: {why}")
    dest = args.dest or paths.engine_builds
    try:
        source = args.source
        if source is None:
            print(f"downloading llama_cpp_python=={PINNED_VERSION} (source distribution) with pip ...")
            source = fetch_sdist(paths.cache / "sdists", PINNED_VERSION)
        if not source.exists():
            raise BuildError(f"{source} does not exist")
    except BuildError as exc:
        print(f"modeldeck: {exc}", file=sys.stderr)
        return 2

    state = TaskState(ProgressBar(unit="percent"), interval_s=0.5)  # the build reports percent done
    outcome: list[object] = []
    done = threading.Event()

    def work() -> None:
        try:
            if args.engine == "llama-server":
                built: object = build_llama_server(
                    source, dest, state, backend=backend, jobs=args.jobs, portable=args.portable
                )
            else:
                built = build_llama_tools(source, dest, state, backend=backend, jobs=args.jobs)
            outcome.append(built)
        except (BuildError, Stopped) as exc:
            outcome.append(exc)
        finally:
            done.set()

    # The build runs on a thread so that Ctrl-C here cancels it (and kills the compiler) instead of orphaning it.
    # Waited for on an event, not with Thread.join: a KeyboardInterrupt inside join() can leave the thread marked
    # as stopped while it runs (CPython 3.11), and the process then exited with the compiler still at work.
    worker = threading.Thread(target=work, name=f"{args.engine}-build")
    worker.start()
    try:
        while not done.wait(0.2):
            pass
    except KeyboardInterrupt:
        state.cancel()
        done.wait()
    worker.join()
    result = outcome[0] if outcome else None
    if isinstance(result, Stopped):
        print("\nmodeldeck: build cancelled", file=sys.stderr)
        return 130
    if isinstance(result, BuildError) or result is None:
        print(f"\nmodeldeck: {result or 'the build stopped'}", file=sys.stderr)
        return 1
    print(f"built {getattr(result, 'executable', None) or getattr(result, 'folder', '')}")
    return 0
