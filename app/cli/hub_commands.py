"""What `modeldeck search / show / pull / import / hf-token` do."""

from __future__ import annotations

import argparse
import getpass
import os
import shutil
import sys
from pathlib import Path

from app.cli.progress import ProgressBar
from app.hub.cache import UnsafeName, default_cache_dir
from app.hub.errors import DEFAULT_ENDPOINT, HubError
from app.hub.hub_api import model_details, search_models
from app.hub.library import known_models, model_id_from_filename
from app.hub.pull import PullRequest, all_variants, pull
from app.hub.task import TaskState
from app.hub.token import TokenStoreError, clear_token, read_token, save_token
from app.paths import AppPaths
from engines.gguf import GGUFError, read_gguf_info


def endpoint() -> str:
    return os.environ.get("HF_ENDPOINT", "").rstrip("/") or DEFAULT_ENDPOINT


def _token() -> str | None:
    token = read_token()
    if token.note:
        print(f"note: {token.note}", file=sys.stderr)
    return token.value


def run(args: argparse.Namespace, paths: AppPaths) -> int:
    """Run one Hub subcommand; failures print one actionable line and return 2."""
    try:
        if args.command == "search":
            return _search(args)
        if args.command == "show":
            return _show(args)
        if args.command == "pull":
            return _pull(args, paths)
        if args.command == "import":
            return _import(args, paths)
        return _hf_token(args)
    except (HubError, UnsafeName, TokenStoreError) as exc:
        print(f"modeldeck: {exc}", file=sys.stderr)
        return 2


def _search(args: argparse.Namespace) -> int:
    results = search_models(
        args.query, endpoint=endpoint(), token=_token(), sort=args.sort, limit=args.limit, library=args.format
    )
    if not results:
        print("No models found.")
    for m in results:
        updated = m.last_modified.date().isoformat() if m.last_modified else "-"
        gated = "  gated" if m.gated else ""
        print(f"{m.id:56} {m.downloads or 0:>10} downloads {m.likes or 0:>6} likes  {updated}{gated}")
    return 0


def _show(args: argparse.Namespace) -> int:
    details = model_details(args.repo, endpoint=endpoint(), token=_token())
    print(f"{details.id}  license: {details.license or 'unknown'}  {'gated' if details.gated else 'not gated'}")
    for variant in all_variants(details):
        parts = f"  {len(variant.files)} files" if len(variant.files) > 1 else ""
        print(f"  {variant.name:24} {(variant.size or 0) / 1e9:8.2f} GB{parts}")
    if not all_variants(details):
        print("  no GGUF variants and no safetensors model")
    return 0


def _pull(args: argparse.Namespace, paths: AppPaths) -> int:
    request = PullRequest.parse(args.spec)
    cache_dir = (args.cache_dir or default_cache_dir()).expanduser().resolve()
    models_dir = args.models_dir.expanduser().resolve() if args.models_dir else None
    state = TaskState(ProgressBar())
    try:
        model = pull(
            request, paths, state, endpoint=endpoint(), token=_token(), cache_dir=cache_dir, models_dir=models_dir
        )
    except KeyboardInterrupt:
        print("\ninterrupted: what was downloaded is kept; run the same command to resume", file=sys.stderr)
        return 130
    engine = "vLLM" if model.format == "safetensors" else "llama.cpp"
    print(
        f"{model.id}: {model.repo_id} {model.variant}, {model.size_bytes / 1e6:,.1f} MB, verified, for {engine}, "
        f"in {model.path}"
    )
    return 0


def _import(args: argparse.Namespace, paths: AppPaths) -> int:
    source: Path = args.path.expanduser()
    if not source.is_file():
        raise HubError(f"{source} is not a file")
    try:
        read_gguf_info(source)
    except GGUFError as exc:
        raise HubError(f"not imported: {exc}") from exc
    model_id = model_id_from_filename(source.name)
    if model_id is None or not source.name.lower().endswith(".gguf"):
        raise HubError(f"{source.name}: name the file MODEL.gguf to import it")
    target = paths.models_dir / source.name
    if target.exists() or model_id in known_models(paths):
        raise HubError(f"a model with the id {model_id} is already in the library; rename the file to import it")
    paths.models_dir.mkdir(parents=True, exist_ok=True)
    how = "copied"
    if args.link:
        try:
            os.link(source, target)
            how = "linked"
        except OSError as exc:
            print(f"note: cannot hard-link ({exc.strerror}); copying instead", file=sys.stderr)
    if how == "copied":
        # Copy under a temporary name, so an interrupted copy never appears in the library.
        partial = target.with_name(f".{target.name}.partial")
        shutil.copyfile(source, partial)
        partial.replace(target)
    print(f"{model_id}: {how} into {target}")
    return 0


def _hf_token(args: argparse.Namespace) -> int:
    if args.action == "clear":
        print("Token removed." if clear_token() else "No token was saved.")
        return 0
    # getpass does not echo on a terminal; from a pipe the first line is the token.
    value = getpass.getpass("Hugging Face token: ") if sys.stdin.isatty() else sys.stdin.readline()
    save_token(value)
    print("Token saved in the OS keyring.")
    return 0
