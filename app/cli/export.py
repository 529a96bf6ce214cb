"""`modeldeck export PLAN --format docker|k8s|helm|ray [--out DIR]`: a deployment for an existing distributed engine."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from app.cli.invocation import Invocation
from app.cli.numbers import positive, whole_number
from app.cli.sizes import size_argument
from app.planner.cluster import MAX_GPUS_PER_NODE, MAX_NODES
from app.planner.recommend import USES

PLAN_FILE = "plan.json"


def _capability(text: str) -> tuple[int, int]:
    major, _, minor = text.partition(".")
    if not (major.isdigit() and minor.isdigit()):
        raise argparse.ArgumentTypeError(f"expected MAJOR.MINOR such as 9.0, got {text!r}")
    return int(major), int(minor)


def add_export_command(commands: Any) -> None:
    export = commands.add_parser("export", help="write a deployment for Docker, Kubernetes, Helm or a Ray cluster")
    export.add_argument(
        "plan", metavar="PLAN",
        help="a model id, model folder or Hub repository (ORG/NAME), or a plan JSON (plan.json, recommend --json)",
    )  # fmt: skip
    export.add_argument("--format", required=True, choices=("docker", "k8s", "helm", "ray"), dest="fmt")
    export.add_argument(
        "--out", type=Path, metavar="DIR",
        help="write the deployment and its plan.json here (default: print only the deployment, for `kubectl apply "
        "-f -`, `helm install -f -` or `sh`)",
    )  # fmt: skip
    export.add_argument("--force", action="store_true",
                        help="replace files in --out DIR that differ from what this export writes")  # fmt: skip
    export.add_argument("--gpu-memory", type=size_argument(default_unit=2**30), default=80 * 2**30, metavar="SIZE",
                        help="memory of each GPU of the cluster (80G)")  # fmt: skip
    export.add_argument("--gpus-per-node", type=whole_number(1, MAX_GPUS_PER_NODE), default=8, metavar="N",
                        help="GPUs in each node (8)")  # fmt: skip
    export.add_argument("--nodes", type=whole_number(1, MAX_NODES), default=1, metavar="N",
                        help="nodes the plan may use (1)")  # fmt: skip
    export.add_argument("--compute-capability", type=_capability, default=(9, 0), metavar="X.Y",
                        help="of the cluster's GPUs (9.0, Hopper)")  # fmt: skip
    export.add_argument("--hardware", type=Path, metavar="FILE",
                        help="nodes like this recorded `hw --json` profile (GPUs, memory, capability)")  # fmt: skip
    export.add_argument("--use", choices=USES, default="serve", help="serve (default), chat or long-context")
    export.add_argument("--users", type=positive, metavar="N", help="concurrent users to hold in the KV cache (8)")
    export.add_argument("--max-model-len", type=positive, metavar="N", help="context per request (the use's default)")
    export.add_argument("--served-model-name", metavar="NAME", help="the model name clients send")
    export.set_defaults(func=run_export)


def run_export(args: argparse.Namespace, invocation: Invocation) -> int:
    from app.cli.hub_commands import endpoint
    from app.export import ExportError, ExportOptions, differing, load_deployment, render, write
    from app.hardware.profile import HardwareProfile
    from app.hub.errors import HubError
    from app.planner.cluster import ClusterPlanError, ClusterTarget, target_from_profile

    paths = invocation.paths
    try:
        if args.hardware is not None:
            profile = HardwareProfile.from_file(args.hardware)
            target = target_from_profile(profile, args.nodes)
        else:
            target = ClusterTarget(args.gpu_memory, args.gpus_per_node, args.nodes, args.compute_capability)
        options = ExportOptions(target, args.use, args.users, args.max_model_len, args.served_model_name)
        token = None
        if "/" in args.plan and not Path(args.plan).expanduser().exists():
            from app.hub.token import read_token

            token = read_token().value
        deployment = load_deployment(args.plan, options, paths, endpoint=endpoint(), token=token)
        files = render(deployment, args.fmt)
    except (ExportError, ClusterPlanError, HubError, OSError, ValueError, KeyError, TypeError) as exc:
        print(f"modeldeck: {exc}", file=sys.stderr)
        return 2
    if args.out is None:
        return _print_deployment(files, args.fmt)
    try:
        if (changed := differing(files, args.out)) and not args.force:
            print(f"modeldeck: {_not_replaced(changed)}", file=sys.stderr)
            return 2
        written = write(files, args.out)
    except OSError as exc:
        print(f"modeldeck: cannot write into {args.out}: {exc}", file=sys.stderr)
        return 2
    for path in written:
        print(path)
    return 0


def _not_replaced(changed: list[Path]) -> str:
    names = ", ".join(str(path) for path in changed)
    one = len(changed) == 1
    return (f"{names} {'differs' if one else 'differ'} from what this export writes (edited since?): nothing is "
            f"written; give --force to replace {'it' if one else 'them'}")  # fmt: skip


def _print_deployment(files: dict[str, str], fmt: str) -> int:
    """Standard output gets the deployment alone, so that a pipe into `kubectl apply -f -` reads nothing else;
    plan.json is written only with --out."""
    deployment = [name for name in files if name != PLAN_FILE]
    # The YAML one where there is one (Compose beside the `docker run` script), for `docker compose -f -`.
    chosen = [name for name in deployment if name.endswith(".yaml")] or deployment
    if len(chosen) > 1:
        names = ", ".join(chosen)
        print(f"modeldeck: --format {fmt} makes {len(chosen)} files ({names}): give --out DIR", file=sys.stderr)
        return 2
    sys.stdout.write(files[chosen[0]])
    return 0
