"""Stopping the service, one this window started or another, and the check before a restart that the ports it
would listen on are free: blocking work the connection runs on its pool threads."""

from __future__ import annotations

import socket
import subprocess
import time

from app.client import ControlClient, ControlError, ServiceUnavailable, find_service
from app.paths import AppPaths

SHUTDOWN_WAIT_S = 30.0
KILL_WAIT_S = 10.0


def shut_down_service(client: ControlClient, process: subprocess.Popen[bytes]) -> None:
    """Ask the service to stop (it stops its engines first), wait for it; signal it if it does not answer."""
    if process.poll() is None:
        try:
            client.shutdown()
        except (ServiceUnavailable, ControlError):
            process.terminate()  # the control API is gone, the process is not: SIGTERM stops it the same way
    try:
        process.wait(timeout=SHUTDOWN_WAIT_S)
    except subprocess.TimeoutExpired:
        process.terminate()
        try:
            process.wait(timeout=KILL_WAIT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def shut_down_other_service(client: ControlClient, paths: AppPaths) -> None:
    """Ask a service this window did not start to stop, and wait until it has withdrawn its discovery file
    (it does that last, once its engines are stopped and its ports closed)."""
    pid = client.address.pid
    try:
        client.shutdown()
    except (ServiceUnavailable, ControlError):
        return  # already gone
    deadline = time.monotonic() + SHUTDOWN_WAIT_S
    while time.monotonic() < deadline:
        address = find_service(paths)
        if address is None or address.pid != pid:
            return
        time.sleep(0.1)
    raise ServiceUnavailable(f"The service (pid {pid}) did not stop within {SHUTDOWN_WAIT_S:.0f} s.")


def check_new_ports(client: ControlClient) -> None:
    """Raise ControlError when a port the restart would listen on is taken by another program."""
    answer = client.settings()
    settings, pending = answer["settings"], set(answer["restart_required"])
    wanted = []
    if pending & {"gateway_port", "bind_address"}:
        wanted.append(("endpoint", str(settings["bind_address"]), int(settings["gateway_port"])))
    if "control_port" in pending and settings["control_port"]:
        wanted.append(("control API", "127.0.0.1", int(settings["control_port"])))
    for what, host, port in wanted:
        if port == answer["running"]["gateway_port"] or port == answer["running"]["control_port"]:
            continue  # the service's own port: free once it stops
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((host, port))
            except OSError as exc:
                raise ControlError(
                    f"port {port} for the {what} is not free ({exc.strerror or exc}); choose another and save"
                ) from exc
