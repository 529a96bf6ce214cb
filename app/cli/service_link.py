"""How a command reaches the service: the one running, or one started on demand as the window starts it."""

from __future__ import annotations

import sys

from app.client import ControlClient, ServiceUnavailable, connect, port_from_env, start_service
from app.paths import AppPaths

NOT_RUNNING = "The ModelDeck service is not running (start it with `modeldeck serve`, or `modeldeck start MODEL`)."


def running_service(paths: AppPaths) -> ControlClient:
    """A client of the running service; ServiceUnavailable when none answers (nothing is started)."""
    client = connect(paths)
    if client is None:
        raise ServiceUnavailable(NOT_RUNNING)
    return client


def service_on_demand(paths: AppPaths) -> ControlClient:
    """A client of the running service, or of one started now in the background; it keeps running after this
    command, like a service the window started, until `modeldeck serve` is stopped or the window quits it."""
    client = connect(paths)
    if client is not None:
        return client
    try:
        # The port as the window chooses it: $MODELDECK_PORT, else the saved settings (`serve` reads them).
        port = port_from_env()
    except ValueError as exc:
        raise ServiceUnavailable(f"Cannot start the ModelDeck service: {exc}.") from None
    print("Starting the ModelDeck service\N{HORIZONTAL ELLIPSIS}", file=sys.stderr)
    return start_service(paths, port).client
