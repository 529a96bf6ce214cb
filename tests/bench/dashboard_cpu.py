"""Benchmark: CPU cost of the open dashboard, and of the service's metrics samplers.

Run by hand from the repository root (pytest does not collect tests/bench):

    QT_QPA_PLATFORM=offscreen .venv/bin/python tests/bench/dashboard_cpu.py [--seconds 30] [--skip-service]

A. The dashboard: a DashboardPanel (1200 x 800) holding an hour of history of 8 series at one point a second,
   fed one live sample a second exactly as the service's event stream does, with its own 2 Hz refresh timer,
   for `--seconds` of wall time, at the 10 min and 1 h windows. CPU is this process's user + system time
   (psutil) over the wall time, in percent of one core; the same run with the panel hidden is the baseline
   of Qt and the feeding itself, and is subtracted. Target: <= 5 % of one core.
B. The samplers: `modeldeck serve` on the bundled model in a scratch MODELDECK_HOME, left idle for `--seconds`;
   the pipeline reports the CPU time its synchronous parts took on the event loop thread (`/api/series`,
   `sampler`), and the whole service's CPU over the same time is shown beside it.
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

HOUR = 3600
SERIES = (
    ("generation_tokens_per_s", {"model": "alpha"}, 40.0),
    ("generation_tokens_per_s", {"model": "beta"}, 20.0),
    ("ttft_p50_s", {"model": "alpha"}, 0.05),
    ("ttft_p50_s", {"model": "beta"}, 0.08),
    ("process_cpu_percent", {"model": "alpha"}, 60.0),
    ("process_cpu_percent", {"model": "beta"}, 30.0),
    ("system_cpu_percent", {}, 70.0),
    ("system_memory_used_bytes", {}, 8.0 * 2**30),
)


def _value(base: float, t: float) -> float:
    return base * (1 + 0.3 * math.sin(t / 40))


def history(end: float) -> dict[str, Any]:
    times = [end - HOUR + i for i in range(HOUR)]
    return {"series": [{"name": n, "labels": labels, "t": times, "v": [_value(b, t) for t in times]}
                       for n, labels, b in SERIES]}  # fmt: skip


def dashboard_cpu(seconds: float, window_index: int, visible: bool) -> tuple[float, int]:
    """Percent of one core over `seconds` with the panel shown (or hidden), and how many refreshes drew."""
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    from app.gui.dashboard.dashboard_panel import DashboardPanel

    app = QApplication.instance() or QApplication([])
    panel = DashboardPanel()
    panel.resize(1200, 800)
    now = time.time()
    panel.load_history(history(now))
    panel.window_combo.setCurrentIndex(window_index)
    if visible:
        panel.show()
    feeder = QTimer()
    feeder.setInterval(1000)

    def feed() -> None:
        t = time.time()
        panel.add_sample({"t": t, "points": [[n, labels, _value(b, t)] for n, labels, b in SERIES]})

    feeder.timeout.connect(feed)
    feeder.start()
    deadline = time.monotonic() + 3  # settle: first layout and paint are not the steady state
    while time.monotonic() < deadline:
        app.processEvents()
        time.sleep(0.01)
    process = psutil.Process()
    before, wall, refreshes = process.cpu_times(), time.monotonic(), panel.refresh_count
    end = wall + seconds
    while time.monotonic() < end:
        app.processEvents()
        time.sleep(0.005)  # an event loop's idle wait, without blocking in exec() for the whole run
    after, elapsed = process.cpu_times(), time.monotonic() - wall
    feeder.stop()
    panel.hide()
    panel.deleteLater()
    app.processEvents()
    used = (after.user - before.user) + (after.system - before.system)
    return 100 * used / elapsed, panel.refresh_count - refreshes


def service_cpu(seconds: float) -> None:
    from app.client import ControlClient, find_service
    from app.hub.library import BUNDLED_ID
    from app.paths import app_paths

    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "MODELDECK_HOME": home, "MODELDECK_API_KEY": "bench"}
        os.environ["MODELDECK_HOME"] = home
        paths = app_paths()
        process = subprocess.Popen(
            [sys.executable, "-m", "app", "serve", "--port", "0", "--model", BUNDLED_ID], cwd=REPO, env=env,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            address = None
            while address is None or address.pid != process.pid:
                time.sleep(0.2)
                address = find_service(paths)
            client = ControlClient(address)
            while next(m for m in client.models() if m["id"] == BUNDLED_ID)["state"] != "ready":
                time.sleep(0.2)
            time.sleep(3)
            service = psutil.Process(process.pid)
            first = client.series(1)["sampler"]
            before, wall = service.cpu_times(), time.monotonic()
            time.sleep(seconds)
            last = client.series(1)["sampler"]
            after, elapsed = service.cpu_times(), time.monotonic() - wall
            ticks = last["ticks"] - first["ticks"]
            per_tick_ms = 1000 * (last["cpu_s"] - first["cpu_s"]) / max(1, ticks)
            whole = 100 * ((after.user - before.user) + (after.system - before.system)) / elapsed
            series = len(client.series(60)["series"])
            print(
                f"B. samplers: {ticks} ticks in {elapsed:.0f} s, {series} series; sampling {per_tick_ms:.2f} ms "
                f"of CPU per tick = {per_tick_ms / 10:.2f} % of one core at 1 s; the whole idle service "
                f"(event loop, history writer, samplers) {whole:.2f} % of one core"
            )
            client.close()
        finally:
            process.terminate()
            process.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--skip-service", action="store_true")
    args = parser.parse_args()
    print(f"machine: {psutil.cpu_count()} logical cores, Qt platform {os.environ['QT_QPA_PLATFORM']}")
    for label, index in (("10 min", 1), ("1 h", 2)):
        hidden, _ = dashboard_cpu(args.seconds, index, visible=False)
        shown, refreshes = dashboard_cpu(args.seconds, index, visible=True)
        print(f"A. dashboard, 8 series, 1 h of history, window {label}: {shown:.2f} % of one core shown, "
              f"{hidden:.2f} % hidden (baseline), so {shown - hidden:.2f} % for the charts; "
              f"{refreshes} refreshes drew in {args.seconds:.0f} s")  # fmt: skip
    if not args.skip_service:
        service_cpu(args.seconds)


if __name__ == "__main__":
    main()
