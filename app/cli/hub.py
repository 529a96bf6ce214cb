"""The Hub subcommands of `modeldeck` on the command line; their work is in app.cli.hub_commands, imported only
when one of them runs (huggingface_hub and httpx would add 0.4 s to every other command's start)."""

from __future__ import annotations

import argparse
from pathlib import Path

from app.cli.invocation import Invocation
from app.cli.numbers import positive

SORTS = ("downloads", "likes", "recent")
FORMATS = ("gguf", "safetensors")
MODELS_DIR_HELP = "a models folder of yours: GGUF files in it, safetensors models in subfolders (repeatable)"


def add_hub_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    search = commands.add_parser("search", help="search the Hugging Face Hub for GGUF (or safetensors) models")
    search.add_argument("query", metavar="QUERY")
    search.add_argument(
        "--format", choices=FORMATS, default="gguf", help="gguf (default, llama.cpp) or safetensors (vLLM)"
    )
    search.add_argument("--sort", choices=SORTS, default="downloads", help="downloads (default), likes or recent")
    search.add_argument("--limit", type=positive, default=20, metavar="N", help="at most N results (20)")
    show = commands.add_parser("show", help="show a Hub model's license, gated status and variants")
    show.add_argument("repo", metavar="REPO")
    pull_cmd = commands.add_parser(
        "pull", help="download a GGUF or safetensors (vLLM) model from the Hub (resumes when run again)"
    )
    pull_cmd.add_argument(
        "spec", metavar="REPO[:QUANT|/FILE]", help="e.g. org/model-GGUF:Q4_K_M, or org/model:safetensors for vLLM"
    )
    where = pull_cmd.add_mutually_exclusive_group()
    where.add_argument("--cache-dir", type=Path, metavar="DIR", help="Hugging Face cache to use (HF_HUB_CACHE)")
    where.add_argument(
        "--models-dir", type=Path, metavar="DIR",
        help="put the files in this folder instead of the Hugging Face cache (a GGUF as DIR/FILE.gguf, a "
        "safetensors model as DIR/org--name/); resumes there too",
    )  # fmt: skip
    imp = commands.add_parser("import", help="add a local GGUF file to the library")
    imp.add_argument("path", type=Path, metavar="PATH")
    imp.add_argument("--link", action="store_true", help="hard-link instead of copying when on the same disk")
    token = commands.add_parser("hf-token", help="save or remove the Hugging Face token (kept in the OS keyring)")
    token.add_argument("action", choices=("set", "clear"), help="set reads the token from standard input")
    for command in (search, show, pull_cmd, imp, token):
        command.set_defaults(func=run_hub_command)


def run_hub_command(args: argparse.Namespace, invocation: Invocation) -> int:
    from app.cli.hub_commands import run

    return run(args, invocation.paths)
