"""Process plumbing for engines: free loopback ports, spawning in a process group, stopping a whole tree,
and finding engines that a crashed earlier service left behind."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import signal
import socket
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

from engines.atomic_files import write_atomically
from engines.environment import engine_environment
from engines.python_entry import script_command

MARKER_ENV = "MODELDECK_ENGINE_MARKER"
PARENT_ENV = "MODELDECK_PARENT_PID"
LIFELINE_ENV = "MODELDECK_LIFELINE_FD"
_WRAPPER = Path(__file__).with_name("_exec_wrapper.py")


def free_loopback_port() -> int:
    """A port that was free on 127.0.0.1 a moment ago (the engine binds it; a lost race is a failed start)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass(frozen=True)
class EngineRecord:
    """Enough to recognise an engine process later, even after its pid was reused."""

    pid: int
    create_time: float
    marker: str
    model_id: str


@functools.cache
def _lifeline() -> int | None:
    """The read end of a pipe whose write end only this process holds, for the life of the process.

    Every engine's watcher (engines/_exec_wrapper.py) waits on it: when this process dies, however it dies, the
    kernel closes the write end and each watcher kills its engine's whole process group. That covers what the
    parent-death signal does not: the engine's own children, and systems without prctl. Both ends are
    non-inheritable: only engines get the read end, by `pass_fds`.
    """
    if os.name != "posix":
        return None
    read_end, _write_end = os.pipe()  # the write end is never closed: it lives as long as the process does
    return read_end


async def spawn_engine(
    argv: tuple[str, ...], env: dict[str, str], marker: str, *, whole_environment: bool = False
) -> tuple[asyncio.subprocess.Process, EngineRecord | None]:
    """Start argv through the exec wrapper in its own process group, output piped, stdin closed, with the allowed
    part of this process's environment (engines/environment.py) and `env` over it. `whole_environment` is for a
    program of ModelDeck's own (the benchmark client), which needs what the service has (its home, its key)."""
    lifeline = _lifeline()
    own = {**env, MARKER_ENV: marker, PARENT_ENV: str(os.getpid())}
    full_env = {**os.environ, **own} if whole_environment else engine_environment(os.environ, own)
    if lifeline is not None:
        full_env[LIFELINE_ENV] = str(lifeline)
    process = await asyncio.create_subprocess_exec(
        *script_command(_WRAPPER), *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=full_env,
        start_new_session=True,
        pass_fds=() if lifeline is None else (lifeline,),
    )  # fmt: skip
    try:
        create_time = psutil.Process(process.pid).create_time()
    except psutil.NoSuchProcess:
        return process, None
    return process, EngineRecord(process.pid, create_time, marker, env.get("MODELDECK_MODEL_ID", ""))


def write_record(directory: Path, record: EngineRecord) -> Path:
    path = directory / f"{record.marker}.json"
    write_atomically(path, json.dumps(asdict(record)))
    return path


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


async def wait_for_exit(process: asyncio.subprocess.Process, poll_s: float = 0.2) -> int:
    """The exit status of `process` once it has exited.

    `Process.wait()` alone is not enough: asyncio resolves it only when the process has exited *and* every pipe
    to it is closed, and a child the engine left behind (vLLM's workers) keeps its output pipe open. The exit
    itself sets `returncode` at once, so that is watched too.
    """
    waiter = asyncio.ensure_future(process.wait())
    try:
        while process.returncode is None:
            await asyncio.wait({waiter}, timeout=poll_s)
    finally:
        waiter.cancel()
    return process.returncode


async def stop_process_tree(process: asyncio.subprocess.Process, grace_s: float) -> int | None:
    """SIGTERM the engine's process group, wait `grace_s`, then SIGKILL the group and every descendant."""
    if process.returncode is not None:
        # It exited by itself, maybe leaving children in its group (vLLM's workers): they go too. The group id
        # cannot have been reused while any member of the group is alive.
        _signal_group(process.pid, signal.SIGKILL)
        return process.returncode
    stragglers = _descendants(process.pid)  # children that left the group are still ours to stop
    _signal_group(process.pid, signal.SIGTERM)
    try:
        await asyncio.wait_for(process.wait(), grace_s)
    except TimeoutError:
        _signal_group(process.pid, signal.SIGKILL)
        await process.wait()
    _signal_group(process.pid, signal.SIGKILL)
    for child in stragglers:
        with contextlib.suppress(psutil.NoSuchProcess):
            child.kill()
    return process.returncode


def _is_recorded_engine(record: EngineRecord) -> psutil.Process | None:
    try:
        process = psutil.Process(record.pid)
        if abs(process.create_time() - record.create_time) > 0.01:
            return None
        return process if process.environ().get(MARKER_ENV) == record.marker else None
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None


def reap_leftover_engines(directory: Path, grace_s: float = 3.0) -> list[EngineRecord]:
    """Stop engines recorded in `directory` that are still running (same pid, create time and marker).

    Records whose process is gone, or whose pid now belongs to another process, are only removed.
    Returns the records of the engines that were stopped.
    """
    stopped: list[EngineRecord] = []
    for path in sorted(directory.glob("*.json")) if directory.is_dir() else []:
        try:
            record = EngineRecord(**json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError):
            path.unlink(missing_ok=True)
            continue
        process = _is_recorded_engine(record)
        if process is not None:
            family = [process, *_descendants(record.pid)]
            _signal_group(record.pid, signal.SIGTERM)
            _, alive = psutil.wait_procs(family, timeout=grace_s)
            for survivor in alive:
                with contextlib.suppress(psutil.NoSuchProcess):
                    survivor.kill()
            psutil.wait_procs(alive, timeout=grace_s)
            stopped.append(record)
        path.unlink(missing_ok=True)
    return stopped
