"""Benchmark of the Linux packages: their sizes, the packaged app's cold start against the .venv one, and the
decode speed of the portable llama-server against a build for this machine, alternated in one run.

Run by hand from the repository root after installers/build.sh (pytest does not collect tests/bench):

    .venv/bin/python tests/bench/package.py --rounds 3

  sizes        dist/ModelDeck-<version>-linux-x86_64.tar.gz and dist/modeldeck_<version>_amd64.deb;
  cold start   `modeldeck serve --model <bundled>` from spawn to the model answering a one-token chat: the tarball's
               executable (unpacked in a temporary folder, clean environment) against `.venv/bin/python -m app`,
               alternated, each with a fresh HOME so neither finds the other's state;
  decode       the packaged portable llama-server against the newest native build in $MODELDECK_TEST_ENGINES,
               alternated, same model and flags (2 threads, 1 slot), 128 tokens at temperature 0 after a warm-up
               request; the engine's own `timings.predicted_per_second`. Target: portable >= 95 % of native.
Medians over rounds, and the ratio of medians.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from app import __version__  # noqa: E402
from app.hub.library import BUNDLED_ID, bundled_model  # noqa: E402
from engines.llama_server import installed_builds  # noqa: E402
from tests.support.service import free_port  # noqa: E402

PROMPT = "Write a long story about a lighthouse keeper and the sea, in many short paragraphs."


def wait_until(check, timeout_s: float = 180.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit("timed out")
        time.sleep(0.05)


def cold_start(command: list[str], home: Path) -> float:
    """Seconds from spawn to the bundled model answering one chat token through the endpoint."""
    port = free_port()
    home.mkdir(parents=True)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8", "MODELDECK_API_KEY": "bench-key"}
    started = time.monotonic()
    process = subprocess.Popen([*command, "serve", "--port", str(port), "--model", BUNDLED_ID], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=home)  # fmt: skip
    body = {"model": BUNDLED_ID, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}

    def answered() -> bool:
        assert process.poll() is None, "the service exited"
        try:
            reply = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body, timeout=120,
                               headers={"Authorization": "Bearer bench-key"})  # fmt: skip
        except httpx.TransportError:
            return False
        return reply.status_code == 200

    try:
        wait_until(answered)
        return time.monotonic() - started
    finally:
        process.terminate()
        process.wait(timeout=60)


def decode_rate(server: Path, model: Path) -> float:
    """The engine's own decode tokens/s for 128 tokens, after a warm-up request."""
    port = free_port()
    process = subprocess.Popen([str(server), "-m", str(model), "--host", "127.0.0.1", "--port", str(port), "-c",
                                "2048", "--parallel", "1", "--threads", "2", "--no-webui"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        try:
            return httpx.get(f"{url}/health", timeout=5).status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_until(healthy)
        # ignore_eos: the bundled model may end a raw prompt at once; the figure is about decoding 128 tokens.
        body = {"prompt": PROMPT, "n_predict": 128, "temperature": 0, "cache_prompt": False, "ignore_eos": True}
        httpx.post(f"{url}/completion", json={**body, "n_predict": 8}, timeout=120)
        reply = httpx.post(f"{url}/completion", json=body, timeout=300).json()
        return float(reply["timings"]["predicted_per_second"])
    finally:
        process.terminate()
        process.wait(timeout=30)


def summary(name: str, values: list[float], unit: str) -> str:
    return f"{name:34} median {statistics.median(values):8.2f} {unit}  (min {min(values):.2f}, max {max(values):.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dist", type=Path, default=REPO / "dist")
    args = parser.parse_args()
    tarball = args.dist / f"ModelDeck-{__version__}-linux-x86_64.tar.gz"
    deb = args.dist / f"modeldeck_{__version__}_amd64.deb"
    print(f"tarball {tarball.stat().st_size / 2**20:.1f} MiB, deb {deb.stat().st_size / 2**20:.1f} MiB")
    print(f"load average at start: {os.getloadavg()}")
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        with tarfile.open(tarball) as archive:
            archive.extractall(root, filter="tar")
        packaged = root / "ModelDeck"
        (portable,) = packaged.glob("engine-builds/llama-server-*-portable")
        native = installed_builds(Path(os.environ.get("MODELDECK_TEST_ENGINES", "~/.cache/modeldeck/test-engines"))
                                  .expanduser())[0].executable  # fmt: skip
        model = bundled_model()
        assert model is not None and model.path is not None
        starts: dict[str, list[float]] = {"packaged": [], "venv": []}
        rates: dict[str, list[float]] = {"portable": [], "native": []}
        for index in range(args.rounds):
            starts["packaged"].append(cold_start([str(packaged / "modeldeck")], root / f"home-p{index}"))
            starts["venv"].append(cold_start([str(REPO / ".venv/bin/python"), "-m", "app"], root / f"home-v{index}"))
            rates["portable"].append(decode_rate(portable / "llama-server", model.path))
            rates["native"].append(decode_rate(native, model.path))
        for name, values in starts.items():
            print(summary(f"cold start to first token, {name}", values, "s"))
        for name, values in rates.items():
            print(summary(f"llama-server decode, {name}", values, "tok/s"))
        ratio = statistics.median(rates["portable"]) / statistics.median(rates["native"])
        print(f"portable / native decode: {ratio:.3f} (target >= 0.95)")
        start_ratio = statistics.median(starts["packaged"]) / statistics.median(starts["venv"])
        print(f"packaged / venv cold start: {start_ratio:.2f}")
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
