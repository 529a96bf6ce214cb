"""Finding the running service (its discovery file), checking that it answers, and starting one when none does."""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass

from filelock import FileLock, Timeout

from app.bounded_json import load_json
from app.client.calls import ControlClient
from app.client.http import ControlError, ServiceAddress, ServiceUnavailable
from app.paths import AppPaths
from app.self_command import modeldeck_command

START_TIMEOUT_S = 30.0
PORT_ENV = "MODELDECK_PORT"
DEFAULT_PORT = 8642


def port_from_env() -> int | None:
    """$MODELDECK_PORT, or None when it is unset or empty; ValueError, saying why, when it is not a port number."""
    value = os.environ.get(PORT_ENV, "").strip()
    if not value:
        return None
    try:
        port = int(value)
    except ValueError:
        port = 0
    if not 0 < port < 65536:
        raise ValueError(f"${PORT_ENV} must be a port number from 1 to 65535, got {value!r}")
    return port


def default_port() -> int:
    """The port of the OpenAI endpoint: $MODELDECK_PORT, else 8642 (the service also reads the settings).
    ValueError when $MODELDECK_PORT is not a port number."""
    return port_from_env() or DEFAULT_PORT


def find_service(paths: AppPaths) -> ServiceAddress | None:
    """The running service's address from its discovery file, or None when none is published."""
    try:
        info = load_json(paths.service_file.read_bytes())
        token = paths.control_token_file.read_text(encoding="utf-8").strip()
        return ServiceAddress(int(info["pid"]), str(info["url"]), str(info["control_url"]), token)
    except (OSError, ValueError, KeyError, TypeError):  # ValueError: BadJson, not UTF-8, not JSON or nested too deeply
        return None


def connect(paths: AppPaths) -> ControlClient | None:
    """A client of the running service, or None when no service answers."""
    address = find_service(paths)
    if address is None:
        return None
    client = ControlClient(address)
    try:
        client.health()
    except (ServiceUnavailable, ControlError):
        client.close()
        return None
    return client


@dataclass
class StartedService:
    """A service this client started; `process` is ours to stop, None when another process's service started first
    (ours then refused to start beside it)."""

    client: ControlClient
    process: subprocess.Popen[bytes] | None


def start_service(paths: AppPaths, port: int | None = None, timeout_s: float = START_TIMEOUT_S) -> StartedService:
    """Start `modeldeck serve` in the background and wait until its control API answers, or until the one that
    another process started at the same time answers. A service of the data folder that no longer answers but still
    holds the folder (stopping) is waited for first."""
    deadline = time.monotonic() + timeout_s
    other = _wait_for_the_folder(paths, deadline)
    if other is not None:
        return StartedService(other, None)
    paths.logs.mkdir(parents=True, exist_ok=True)
    command = [*modeldeck_command(), "serve"]
    if port is not None:
        command += ["--port", str(port)]
    with open(paths.logs / "service-stdout.log", "ab") as output:
        process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT, start_new_session=True,
            env=os.environ.copy(),
        )  # fmt: skip
    while time.monotonic() < deadline:
        exited = process.poll() is not None
        address = find_service(paths)
        if address is not None and (address.pid == process.pid or exited):
            client = connect(paths)
            if client is not None:
                return StartedService(client, process if client.address.pid == process.pid else None)
        if exited and not _service_claimed(paths):
            raise ServiceUnavailable(_last_lines(paths, f"The service exited with code {process.returncode}"))
        time.sleep(0.1)
    process.terminate()
    raise ServiceUnavailable(f"The service did not start within {timeout_s:.0f} s.")


def _wait_for_the_folder(paths: AppPaths, deadline: float) -> ControlClient | None:
    """None once no service holds the data folder; a client of the one that holds it if it comes to answer (it was
    starting). A service that is stopping holds the folder until its engines have stopped, which can take longer than
    a new one waits for it (CLAIM_WAIT_S in app.service.data_folder): started meanwhile, ours would give up on the
    folder and the command fail, though the folder is free a moment later."""
    while _service_claimed(paths):
        client = connect(paths)
        if client is not None:
            return client
        if time.monotonic() >= deadline:
            raise ServiceUnavailable(
                "Another ModelDeck service of this data folder is still starting or stopping and does not answer: "
                "try again once it has stopped."
            )
        time.sleep(0.1)
    return None


def _service_claimed(paths: AppPaths) -> bool:
    """Whether a service holds the data folder (app.service.server claims it): starting, running or stopping."""
    if not paths.service_lock.exists():
        return False
    lock = FileLock(paths.service_lock, timeout=0, mode=0o600)
    try:
        lock.acquire()
    except Timeout:
        return True
    lock.release()
    return False


def _last_lines(paths: AppPaths, headline: str) -> str:
    try:
        lines = (paths.logs / "service-stdout.log").read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        lines = []
    return "\n".join([headline + ":", *lines[-8:]])
