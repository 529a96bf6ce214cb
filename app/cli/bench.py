"""`modeldeck bench`: a model's throughput and latency at rising concurrency, measured through the running service
and saved as a card; or two saved cards side by side."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from app.bench.levels import MAX_CONCURRENCY
from app.bench.prompts import DEFAULT_PROMPT_MODE, DEFAULT_TURNS, MAX_TURNS, PROMPT_MODES
from app.cli.invocation import Invocation
from app.cli.numbers import positive, whole_number
from app.client import connect

if TYPE_CHECKING:
    from app.bench.card import LevelResult


def add_bench_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    bench = commands.add_parser("bench", help="measure a model's throughput and latency at rising concurrency")
    bench.add_argument("model", nargs="?", metavar="MODEL", help="a model id from `modeldeck models`")
    bench.add_argument("--concurrency", default="1,4,16,64", metavar="N,N,...", help="levels to sweep (1,4,16,64)")
    bench.add_argument("--prompt-tokens", type=positive, default=256, metavar="N",
                       help="prompt length in tokens, chat template included (256)")  # fmt: skip
    bench.add_argument(
        "--prompt-mode", choices=PROMPT_MODES, default=DEFAULT_PROMPT_MODE,
        help="unique: each request its own prompt (default); shared-prefix: the same first --prefix-tokens, then "
        "its own; multi-turn: --conversations taking --turns turns in order; identical: one prompt for all (this "
        "measures the engine's prompt cache)",
    )  # fmt: skip
    bench.add_argument(
        "--prefix-tokens", type=whole_number(0), default=0, metavar="N", help="shared-prefix: tokens shared"
    )
    bench.add_argument("--conversations", type=whole_number(1, MAX_CONCURRENCY), metavar="N",
                       help="multi-turn: per level (max(3, concurrency))")  # fmt: skip
    bench.add_argument("--turns", type=whole_number(2, MAX_TURNS), default=DEFAULT_TURNS, metavar="N",
                       help=f"multi-turn: turns per conversation ({DEFAULT_TURNS})")  # fmt: skip
    bench.add_argument("--seed", type=whole_number(0), default=0, metavar="N",
                       help="the prompts' seed: runs with one repeat (0)")  # fmt: skip
    bench.add_argument("--output-tokens", type=positive, default=128, metavar="N", help="tokens to generate (128)")
    bench.add_argument("--requests", type=positive, metavar="N", help="requests per level (max(8, 2 x concurrency))")
    bench.add_argument("--json", action="store_true", help="print the benchmark card as JSON")
    bench.add_argument(
        "--progress-jsonl", action="store_true",
        help="print one JSON line per step, request finished, level measured, and the card saved (for programs)",
    )  # fmt: skip
    bench.add_argument("--compare", nargs=2, metavar=("CARD_A", "CARD_B"), help="show two saved cards side by side")
    bench.set_defaults(func=_bench)


def _bench(args: argparse.Namespace, invocation: Invocation) -> int:
    from app.bench.card import compare, load_card, results_table, turns_table
    from app.bench.levels import parse_concurrency
    from app.bench.progress import CardSaved, LevelDone, SweepEvent, event_json
    from app.bench.sweep import SweepError, SweepOptions, level_line, run_sweep
    from app.card_files import CardSaveError, load_named

    paths = invocation.paths
    if args.compare:
        try:
            cards = load_named(args.compare, lambda reference: load_card(reference, paths.bench_dir))
        except ValueError as exc:
            print(f"modeldeck: {exc}", file=sys.stderr)
            return 2
        print(compare(*cards), end="")
        return 0
    if not args.model:
        print("modeldeck: bench needs a MODEL (or --compare CARD_A CARD_B)", file=sys.stderr)
        return 2
    try:
        options = SweepOptions(parse_concurrency(args.concurrency), args.prompt_tokens, args.output_tokens,
                               args.requests, args.prompt_mode, args.seed, args.prefix_tokens, args.conversations,
                               args.turns)  # fmt: skip
    except ValueError as exc:
        print(f"modeldeck: {exc}", file=sys.stderr)
        return 2
    client = connect(paths)
    if client is None:
        print("The ModelDeck service is not running (start it with `modeldeck serve`).", file=sys.stderr)
        return 1

    measured: list[LevelResult] = []

    def progress(event: SweepEvent) -> None:
        if isinstance(event, LevelDone):
            measured.append(event.result)
        line = event_json(event) if args.progress_jsonl else None if args.json else level_line(event)
        if line is not None:
            print(line, flush=True)

    try:
        card = run_sweep(client, args.model, options, progress)
    except SweepError as exc:
        print(f"modeldeck: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        _print_interrupted(args, measured, len(options.concurrency))
        return 130
    finally:
        client.close()
    try:
        json_path, md_path = card.save(paths.bench_dir)
    except CardSaveError as exc:
        if args.json and not args.progress_jsonl:  # the measurements are not lost with the card
            print(json.dumps(card.to_dict(), indent=2))
        print(f"modeldeck: the benchmark ran, but {exc}", file=sys.stderr)
        return 1
    if args.progress_jsonl:
        progress(CardSaved(card.id, str(json_path), str(md_path)))
    elif args.json:
        print(json.dumps(card.to_dict(), indent=2))
    else:
        turns = turns_table(card.results)
        print("\n".join(["", *results_table(card.results), *(["", *turns] if turns else []), "",
                         f"Card: {md_path}", f"      {json_path}"]))  # fmt: skip
    return 0 if all(level.errors == 0 for level in card.results) else 1


def _print_interrupted(args: argparse.Namespace, measured: list[LevelResult], levels: int) -> None:
    """The levels a sweep stopped by Ctrl-C measured (as the card would have them), marked as interrupted; the
    card is not saved: its parameters say what was asked, and only part of it ran."""
    from dataclasses import asdict

    from app.bench.card import results_table, turns_table, with_gains

    measured = with_gains(measured)
    if args.json and not args.progress_jsonl:  # --progress-jsonl printed each level as it came
        print(
            json.dumps({"model": args.model, "interrupted": True, "results": [asdict(r) for r in measured]}, indent=2)
        )
    elif measured and not args.progress_jsonl:
        turns = turns_table(measured)
        print("\n".join(["", *results_table(measured), *(["", *turns] if turns else [])]))
    print(f"modeldeck: interrupted after {len(measured)} of {levels} levels: no card is saved", file=sys.stderr)
