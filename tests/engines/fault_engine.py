"""A tiny real engine process for injecting faults that the real engine cannot be made to show on demand.

It serves GET /v1/models with 200 once "loaded", and can start slowly (with or without progress output),
exit during start-up (or die by a signal), exit after a while once ready, ignore SIGTERM, or start a grandchild process.
"""

from __future__ import annotations

import argparse
import http.server
import os
import signal
import subprocess
import sys
import threading
import time

PROBED = threading.Event()  # set once the supervisor has seen the engine ready


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        PROBED.set()
        body = b'{"object": "list", "data": []}'
        self.send_response(200 if self.path == "/v1/models" else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        print("request", self.path, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--load-seconds", type=float, default=0.0)
    parser.add_argument("--progress", action="store_true", help="print a line every 0.2 s while loading")
    parser.add_argument("--fail-start", type=int, help="exit with this code during start-up")
    parser.add_argument("--die-by-signal", type=int, help="during start-up, kill itself with this signal")
    parser.add_argument("--exit-after", type=float, help="once probed ready, exit after this many seconds")
    parser.add_argument("--exit-code", type=int, default=0)
    parser.add_argument("--ignore-term", action="store_true")
    parser.add_argument("--grandchild", action="store_true", help="start a sleeping grandchild process")
    args = parser.parse_args()
    print(f"fault engine pid {os.getpid()} starting", flush=True)
    if args.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if args.grandchild:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        print(f"grandchild pid {child.pid}", flush=True)
    deadline = time.monotonic() + args.load_seconds
    while time.monotonic() < deadline:
        time.sleep(0.2)
        if args.progress:
            print("loading...", flush=True)
    if args.die_by_signal is not None:
        os.kill(os.getpid(), args.die_by_signal)
    if args.fail_start is not None:
        print("fatal: cannot load the model (injected)", flush=True)
        sys.exit(args.fail_start)
    server = http.server.HTTPServer(("127.0.0.1", args.port), _Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print("ready", flush=True)
    if args.exit_after is not None:
        # Counted from the first probe, not from start: on a loaded machine the supervisor may probe late, and an
        # engine gone before it was seen ready is a start-up failure, not the crash of a ready engine.
        PROBED.wait()
        time.sleep(args.exit_after)
        print("exiting (injected)", flush=True)
        os._exit(args.exit_code)
    while True:
        time.sleep(1)


if __name__ == "__main__":
    main()
