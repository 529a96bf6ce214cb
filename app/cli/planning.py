"""`modeldeck hw` and `modeldeck recommend`: this machine as detected here, and which engine, quantization and settings
fit a model on it (or on a recorded profile), with no service needed."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from app.cli.invocation import Invocation
from app.cli.numbers import positive
from app.planner.recommend import USES
from app.settings import MAX_LOSS_PCT


def _loss_percent(text: str) -> float:
    try:
        percent = float(text)
    except ValueError:
        percent = math.nan
    if not 0 <= percent <= MAX_LOSS_PCT:
        raise argparse.ArgumentTypeError(f"expected a percentage from 0 to {MAX_LOSS_PCT:g}, got {text!r}")
    return percent


def add_planning_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    hw = commands.add_parser("hw", help="show this machine's CPU, memory and GPUs, and why a GPU cannot be used")
    hw.add_argument("--json", action="store_true", help="print the hardware profile as JSON")
    recommend = commands.add_parser("recommend", help="say which engine, quantization and settings fit a model here")
    recommend.add_argument("model", metavar="MODEL", help="a model id from `modeldeck models`, a GGUF file or a folder")
    recommend.add_argument("--use", choices=USES, default="chat", help="chat (default), serve or long-context")
    recommend.add_argument("--users", type=positive, metavar="N", help="concurrent users to serve (--use serve; 8)")
    recommend.add_argument("--hardware", type=Path, metavar="FILE", help="plan for a recorded `hw --json` profile")
    recommend.add_argument("--json", action="store_true", help="print the recommendation as JSON")
    recommend.add_argument(
        "--max-loss", type=_loss_percent, metavar="PCT",
        help="rank a variant whose measured perplexity increase passes PCT %% lower (settings: max_quality_loss_pct)",
    )  # fmt: skip
    hw.set_defaults(func=_hw)
    recommend.set_defaults(func=_recommend)


def _hw(args: argparse.Namespace, invocation: Invocation) -> int:
    # Detection is local and read-only: it needs no service, and works when none is running.
    from app.hardware.detect import detect_hardware
    from app.hardware.summary import format_profile

    paths = invocation.paths
    profile = detect_hardware(paths.models_dir, bandwidth_cache=paths.bandwidth_cache)
    print(profile.to_json() if args.json else format_profile(profile))
    return 0


def _recommend(args: argparse.Namespace, invocation: Invocation) -> int:
    from app.hardware.detect import detect_hardware
    from app.hardware.profile import HardwareProfile
    from app.planner.calibration import CalibrationStore
    from app.planner.plans import NoVariants, plan_model, resolve
    from app.planner.summary import summary_lines
    from engines.gguf import GGUFError

    paths = invocation.paths
    try:
        model_id, variants = resolve(args.model, paths)
        hardware = (
            HardwareProfile.from_file(args.hardware)
            if args.hardware
            else detect_hardware(paths.models_dir, bandwidth_cache=paths.bandwidth_cache)
        )
    except (NoVariants, GGUFError, OSError, ValueError, KeyError, TypeError) as exc:
        print(f"modeldeck: {exc}", file=sys.stderr)
        return 2
    from app.installs.available import available_engines
    from app.planner.plans import detect_engines
    from app.quality.expected import quality_lookup

    engines = available_engines(paths)
    calibration = CalibrationStore(paths.calibration_db)
    result = plan_model(
        hardware,
        model_id,
        variants,
        args.use,
        args.users,
        calibration,
        engines,
        detect_engines(engines),
        *quality_lookup(paths, args.max_loss),
    )
    print(
        json.dumps({"model": model_id, **result.to_dict()}, indent=2)
        if args.json
        else "\n".join(summary_lines(model_id, result))
    )
    return 0 if result.best else 1
