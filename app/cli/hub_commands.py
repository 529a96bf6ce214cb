"""What `modeldeck search / show / pull / import / hf-token` do."""

from __future__ import annotations

import argparse
import getpass
import os
import sys
from pathlib import Path

from app.cli.progress import ProgressBar
from app.hub.cache import UnsafeName, default_cache_dir
from app.hub.errors import DEFAULT_ENDPOINT, HubError
from app.hub.hub_api import model_details, search_models
from app.hub.library import known_models
from app.hub.pull import PullRequest, all_variants, pull
from app.hub.token import TokenStoreError, clear_token, read_token, save_token
from app.paths import AppPaths
from app.task import TaskState


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
    """Through the running service, which then serves the model at once; without one, by the same library code."""
    from app.client import ControlError, connect
    from app.service.control.library_ops import LibraryError, import_gguf

    source = args.path.expanduser().absolute()  # not resolved: a link's own name names the model
    client = connect(paths)
    try:
        if client is not None:
            imported = client.import_model(str(source), link=args.link)
            model_id, target = imported["id"], Path(imported["path"])
        else:
            spec = import_gguf(source, paths, set(known_models(paths)), link=args.link)
            model_id, target = spec.id, paths.models_dir / spec.name
    except (LibraryError, ControlError) as exc:
        raise HubError(str(exc)) from exc
    except KeyboardInterrupt:  # the copy stops and is removed: here, or in the service, which sees us go away
        print("\nImport cancelled.", file=sys.stderr)
        return 130
    finally:
        if client is not None:
            client.close()
    how = "linked" if source.resolve().samefile(target) else "copied"
    if args.link and how == "copied":
        print("note: cannot hard-link there (another disk?); copied instead", file=sys.stderr)
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
