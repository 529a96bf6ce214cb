"""Benchmark: time and peak memory of a quality run per variant on the bundled model, and the figures themselves.

Run by hand from the repository root (pytest does not collect tests/bench), with llama.cpp's quality tools built
(`modeldeck engines build llama-tools`, or $MODELDECK_LLAMA_TOOLS pointing at them):

    .venv/bin/python tests/bench/quality_run.py [--tokens 4096] [--threads N]

In a scratch MODELDECK_HOME: a Q4_0 and a Q2_K are made from the bundled Q4_1 with `modeldeck quantize`, then
`modeldeck quality` scores `--tokens` tokens of the default text with every variant against the Q4_1. Time is
each tool run's wall time, model load included; memory its peak resident set (wait4). The machine's load average
is printed before and after: on a shared 2-core machine the times vary with it, the figures do not.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def modeldeck(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MODELDECK_HOME": str(home), "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True, env=env, cwd=REPO,
                          check=False)  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--threads", type=int)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="quality-bench-") as scratch:
        home = Path(scratch)
        for quantization in ("Q4_0", "Q2_K"):
            started = time.monotonic()
            done = modeldeck(home, "quantize", "smollm2-135m-instruct", "--to", quantization)
            if done.returncode != 0:
                print(done.stderr, file=sys.stderr)
                return 1
            print(f"quantize to {quantization}: {time.monotonic() - started:.1f} s")
        print(f"load average before: {os.getloadavg()}")
        started = time.monotonic()
        extra = ["--threads", str(args.threads)] if args.threads else []
        done = modeldeck(home, "quality", "smollm2-135m-instruct", "--tokens", str(args.tokens), "--json", *extra)
        elapsed = time.monotonic() - started
        print(f"load average after: {os.getloadavg()}")
        if done.returncode != 0:
            print(done.stderr, file=sys.stderr)
            return 1
        card = json.loads(done.stdout)
        text = card["text"]
        print(f"\n{text['description']}: {text['tokens_read']} tokens read, {text['tokens']} scored "
              f"({text['chunks']} chunks of {text['n_ctx']}); whole run {elapsed:.1f} s\n")  # fmt: skip
        print(f"{'variant':28} {'type':5} {'PPL':>9} {'PPL vs ref':>10} {'mean KLD':>9} {'top-1 agree':>11} "
              f"{'seconds':>8} {'peak MiB':>8}")  # fmt: skip
        for r in card["results"]:
            change = "ref" if r["reference"] else f"{(r['ppl_ratio'] - 1) * 100:+.2f} %"
            agreement, peak = r["top_token_agreement"] * 100, r["peak_rss_bytes"] / 2**20
            print(f"{r['id']:28} {r['quantization']:5} {r['perplexity']:9.3f} {change:>10} {r['kld_mean']:9.5f} "
                  f"{agreement:10.2f}% {r['seconds']:8.1f} {peak:8.0f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
