"""`modeldeck engines`: which engines this machine can run and where they are; `modeldeck engines build llama-server`
builds llama.cpp's native server from the sources in llama-cpp-python's sdist, with a progress bar."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from app.cli.cancellable import run_cancellable
from app.cli.invocation import Invocation
from app.cli.numbers import positive
from app.cli.progress import ProgressBar
from app.paths import AppPaths
from app.task import Stopped, TaskState


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
    build.add_argument("--jobs", type=positive, metavar="N", help="parallel compile jobs (default: all cores)")
    build.add_argument(
        "--portable", action="store_true",
        help="run on any CPU of this architecture: one CPU library per instruction-set level, the best loaded at "
        "start; CUDA needs no driver here (what packages ship; several times longer to build)",
    )  # fmt: skip
    build.add_argument(
        "--with-tools", action="store_true",
        help="llama-server: build llama-tools from the same tree too (ggml compiled once; not with --portable)",
    )  # fmt: skip
    engines.set_defaults(func=run_engines_command)


def run_engines_command(args: argparse.Namespace, invocation: Invocation) -> int:
    if args.engines_action == "build":
        return _build(args, invocation.paths)
    return _list(invocation.paths)


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
    )
    from app.installs.llama_tools_build import build_llama_server_and_tools, build_llama_tools
    from app.installs.sdist_download import download_sdist

    backend = args.backend
    if backend is None:
        backend, why = detect_backend(for_package=args.portable)
        print(f"backend: {why}")
    if args.with_tools and (args.engine != "llama-server" or args.portable):
        print("modeldeck: --with-tools goes with llama-server, built for this machine (not --portable)",
              file=sys.stderr)  # fmt: skip
        return 2
    dest = args.dest or paths.engine_builds
    source: Path | None = args.source
    if source is not None and not source.exists():
        print(f"modeldeck: {source} does not exist", file=sys.stderr)
        return 2

    state = TaskState(ProgressBar(unit="percent"), interval_s=0.5)  # the build reports percent done

    def work() -> Path:
        sdist = source
        if sdist is None:
            print(f"downloading llama_cpp_python=={PINNED_VERSION} (source distribution) with pip ...")
            sdist = download_sdist(paths.cache / "sdists", PINNED_VERSION, state)
        if args.with_tools:
            server, tools = build_llama_server_and_tools(sdist, dest, state, backend=backend, jobs=args.jobs)
            print(f"built {tools.folder}")
            return server.executable
        if args.engine == "llama-server":
            return build_llama_server(
                sdist, dest, state, backend=backend, jobs=args.jobs, portable=args.portable
            ).executable
        return build_llama_tools(sdist, dest, state, backend=backend, jobs=args.jobs).folder

    # On a thread so that Ctrl-C here cancels the build (and kills the compiler) instead of orphaning it.
    try:
        built = run_cancellable(work, state, f"{args.engine}-build")
    except Stopped:
        print("\nmodeldeck: build cancelled", file=sys.stderr)
        return 130
    except BuildError as exc:
        print(f"\nmodeldeck: {exc}", file=sys.stderr)
        return 1
    print(f"built {built}")
    return 0
