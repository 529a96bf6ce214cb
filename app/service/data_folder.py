"""The service's hold on its data folder: the lock that keeps a second service of the folder away (with the reason
it is held, for the one refused), and the discovery file and control token, withdrawn only by the process that
published them."""

from __future__ import annotations

import contextlib
import os
import socket
import urllib.parse

import psutil
from filelock import FileLock, Timeout

from app.bounded_json import load_json
from app.paths import AppPaths

CLAIM_WAIT_S = 3.0  # a service stopping (the window's restart) withdraws its files, then lets go of the lock


class FolderHeld(Exception):
    """Another service holds the data folder; the message says which and what to do."""


def claim_data_folder(paths: AppPaths) -> FileLock:
    """The data folder's service lock, held until the service has stopped: a second service of the folder would
    reap the first one's engines and take over its discovery file and control token."""
    lock = FileLock(paths.service_lock, timeout=CLAIM_WAIT_S, mode=0o600)
    try:
        lock.acquire()
    except Timeout:
        raise FolderHeld(_why_the_folder_is_held(paths)) from None
    return lock


def _published(paths: AppPaths) -> tuple[int, str, str]:
    """The pid, endpoint and control API the discovery file names; (0, "", "") when there is none to read."""
    try:
        info = load_json(paths.service_file.read_bytes())
        return int(info["pid"]), str(info["url"]), str(info["control_url"])
    except (OSError, ValueError, KeyError, TypeError):  # ValueError: BadJson, not UTF-8, not JSON or nested too deeply
        return 0, "", ""


def _why_the_folder_is_held(paths: AppPaths) -> str:
    pid, url, control_url = _published(paths)
    if not (pid and psutil.pid_exists(pid)):  # none published yet (starting), or left by a service that was killed
        return (
            "Another ModelDeck service of this data folder is starting or stopping: use it once it answers, or give "
            "this one its own folder with MODELDECK_HOME."
        )
    if not _takes_connections(control_url):  # it closes its listeners first when it stops, its files last
        return (
            f"The ModelDeck service of this data folder (pid {pid}) is stopping: try again in a moment, or give this "
            "one its own folder with MODELDECK_HOME."
        )
    return (
        f"A ModelDeck service already runs for this data folder (pid {pid}, {url}): use it, stop it first "
        f"(Ctrl-C where it runs, or kill {pid}), or give this one its own folder with MODELDECK_HOME."
    )


def _takes_connections(url: str) -> bool:
    try:
        address = urllib.parse.urlsplit(url)
        with socket.create_connection((address.hostname or "", address.port or 80), timeout=2.0):
            return True
    except (OSError, ValueError):  # ValueError: a port that is no number
        return False


def withdraw_discovery(paths: AppPaths) -> None:
    """Remove the discovery file and the control token while they are this process's, never another service's."""
    if _published(paths)[0] == os.getpid():
        for path in (paths.service_file, paths.control_token_file):
            with contextlib.suppress(OSError):
                path.unlink()
