"""vLLM in a virtual environment of its own, one per version: `<data>/engines/vllm-<version>/`.

vLLM pins its own torch and ships CUDA builds only, so it never shares ModelDeck's environment. An installation is
created with `python -m venv`, filled with `pip install vllm==<version>` (progress read from pip's output,
cancellable) and verified with `vllm --version`; or the user points at an existing one (a `vllm` executable or a
virtual environment). The installation in use is recorded in `<data>/engines/vllm.json`.

A failed or cancelled install removes the environment it was creating and leaves the one in use untouched.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from app.bounded_json import load_json
from app.installs.child_output import output_lines, stop_group
from app.installs.pip_progress import RAW_PROGRESS_PIP, parse_pip_line, pip_version
from app.paths import AppPaths
from app.task import TaskState
from engines.atomic_files import write_atomically
from engines.base import Engine
from engines.vllm import VLLMEngine

log = logging.getLogger("modeldeck.installs")

DEFAULT_VERSION = "0.34.0"
PACKAGE = "vllm"
VERIFIED_MARKER = ".modeldeck-verified"  # written last: an environment without it is a leftover of a failed install
VERIFY_TIMEOUT_S = 300.0  # `vllm --version` imports torch: tens of seconds on a cold disk
ERROR_LINES = 15


class InstallError(Exception):
    """The installation could not be made or used; the message says why, with pip's last lines where it failed."""


@dataclass(frozen=True)
class VLLMInstall:
    """A verified vLLM: its executable, the version it reported, and whether ModelDeck made (and may delete) it."""

    executable: Path
    version: str
    managed: bool

    def to_dict(self) -> dict[str, str | bool]:
        return {**asdict(self), "executable": str(self.executable)}


def engines_dir(paths: AppPaths) -> Path:
    return paths.data / "engines"


def env_dir(paths: AppPaths, version: str) -> Path:
    return engines_dir(paths) / f"vllm-{version}"


def registration_file(paths: AppPaths) -> Path:
    return engines_dir(paths) / "vllm.json"


def _bin(env: Path, name: str) -> Path:
    return env / ("Scripts" if os.name == "nt" else "bin") / (f"{name}.exe" if os.name == "nt" else name)


def executable_in(path: Path) -> Path:
    """The `vllm` executable `path` names: the file itself, or the one in a virtual environment's bin directory."""
    path = path.expanduser()
    if path.is_dir():
        candidate = _bin(path, "vllm")
        if not candidate.is_file():
            raise InstallError(f"{path} is a folder without {candidate.relative_to(path)}: not a vLLM environment")
        return candidate.absolute()
    if not path.is_file():
        raise InstallError(f"{path} does not exist")
    if not os.access(path, os.X_OK):
        raise InstallError(f"{path} is not executable")
    return path.absolute()


def verify(executable: Path, expected: str | None = None, timeout_s: float = VERIFY_TIMEOUT_S) -> str:
    """The version `executable --version` prints (its last line); InstallError when it fails or differs."""
    try:
        done = subprocess.run(
            [str(executable), "--version"], capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise InstallError(f"{executable} --version failed: {exc}") from exc
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-ERROR_LINES:])
        raise InstallError(f"{executable} --version exited with {done.returncode}:\n{tail or '(no output)'}")
    version = lines[-1].strip()
    if expected is not None and version != expected:
        raise InstallError(f"{executable} reports version {version}, not {expected}")
    return version


def register(paths: AppPaths, install: VLLMInstall) -> None:
    """Make `install` the vLLM that ModelDeck launches."""
    write_atomically(registration_file(paths), json.dumps(install.to_dict(), indent=2))


def registered(paths: AppPaths) -> VLLMInstall | None:
    """The vLLM in use, or None. InstallError when its record is unreadable (it is left as it is, for a look)."""
    path = registration_file(paths)
    if not path.is_file():
        return None
    try:
        data = load_json(path.read_bytes())
        return VLLMInstall(Path(data["executable"]), str(data["version"]), bool(data["managed"]))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InstallError(f"{path} is not a vLLM record ({exc}); run `modeldeck vllm-env use PATH` again") from exc


def configured_engines(paths: AppPaths) -> dict[str, Engine]:
    """Adapters for the engines installed through ModelDeck, over the registry's defaults (which look on PATH).
    An unreadable record leaves the default in place; `modeldeck vllm-env status` says what is wrong with it."""
    try:
        install = registered(paths)
    except InstallError as exc:
        log.warning("%s", exc)
        return {}
    return {VLLMEngine.name: VLLMEngine(install.executable)} if install else {}


def use_existing(paths: AppPaths, path: Path) -> VLLMInstall:
    """Verify the vLLM at `path` (an executable or a virtual environment) and make it the one in use."""
    executable = executable_in(path)
    install = VLLMInstall(executable, verify(executable), managed=False)
    register(paths, install)
    return install


def install_vllm(
    paths: AppPaths,
    version: str,
    task: TaskState,
    *,
    pip_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    python: str = sys.executable,
) -> VLLMInstall:
    """Create `<data>/engines/vllm-<version>/`, pip-install vLLM into it and verify it; register it when verified.

    `pip_args` go to `pip install` (an index, `--no-index --find-links DIR`); `env` is added to pip's environment.
    Raises InstallError, or app.task.Stopped when `task` is cancelled; either way the new environment is gone.
    An environment of this version that was verified before is kept and registered again without reinstalling.
    """
    target = env_dir(paths, version)
    executable = _bin(target, "vllm")
    if (target / VERIFIED_MARKER).is_file() and executable.is_file():
        install = VLLMInstall(executable, verify(executable, version), managed=True)
        register(paths, install)
        return install
    if target.exists():
        shutil.rmtree(target)  # a leftover of an install that did not finish: ours, and unusable
    target.parent.mkdir(parents=True, exist_ok=True)
    full_env = {**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"}
    try:
        task.working_on(f"creating the environment {target}")
        task.advance(0)
        _run([python, "-m", "venv", str(target)], task, full_env, "python -m venv")
        venv_python = str(_bin(target, "python"))
        args = [venv_python, "-m", "pip", "install", f"{PACKAGE}=={version}", *pip_args]
        if (pip_version(_output([venv_python, "-m", "pip", "--version"], full_env)) or (0, 0)) >= RAW_PROGRESS_PIP:
            args += ["--progress-bar", "raw"]
        else:
            args += ["--progress-bar", "off"]
        _run(args, task, full_env, f"pip install {PACKAGE}=={version}")
        task.working_on(f"verifying: {executable.name} --version")
        task.advance(0)
        install = VLLMInstall(executable, verify(executable, version), managed=True)
        (target / VERIFIED_MARKER).write_text(version, encoding="utf-8")
    except BaseException:
        shutil.rmtree(target, ignore_errors=True)
        raise
    register(paths, install)
    task.finish()
    return install


def _output(argv: list[str], env: Mapping[str, str]) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, env=dict(env), timeout=60, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


def _run(argv: list[str], task: TaskState, env: Mapping[str, str], what: str) -> None:
    """Run `argv`, reporting each step pip prints; stop it (its whole group) as soon as the task is cancelled."""
    try:
        process = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
            env=dict(env), start_new_session=True, errors="replace",
        )  # fmt: skip
    except OSError as exc:
        raise InstallError(f"{what} could not start: {exc}") from exc
    tail: deque[str] = deque(maxlen=ERROR_LINES)
    downloaded = 0
    try:
        for line in output_lines(process, task.check):
            tail.append(line.rstrip())
            step = parse_pip_line(line)
            if step is None:
                continue
            if step.phase == "downloading" and step.detail:
                task.working_on(f"downloading {step.detail}")
                task.begin(step.total or 0)
                downloaded = 0
            elif step.phase == "downloading" and step.done is not None:
                task.advance(step.done - downloaded)
                downloaded = step.done
                continue
            else:
                task.working_on(f"{step.phase} {step.detail}")
            task.advance(0)
    finally:
        if process.poll() is None:
            stop_group(process)  # pip and whatever build it started
    code = process.wait()
    if code != 0:
        raise InstallError(f"{what} failed with exit code {code}:\n" + "\n".join(tail))


__all__ = [
    "DEFAULT_VERSION",
    "InstallError",
    "VLLMInstall",
    "configured_engines",
    "env_dir",
    "install_vllm",
    "register",
    "registered",
    "use_existing",
    "verify",
]
