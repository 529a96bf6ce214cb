"""Where ModelDeck keeps its files: platformdirs' user directories, or everything under $MODELDECK_HOME."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

import platformdirs

HOME_ENV = "MODELDECK_HOME"
APP_NAME = "modeldeck"


@dataclass(frozen=True)
class AppPaths:
    """The directories ModelDeck writes to. `state` holds runtime files: discovery, tokens, engine records."""

    config: Path
    data: Path
    logs: Path
    cache: Path
    state: Path
    models_override: Path | None = None  # the models directory the user chose (app.settings)

    @property
    def models_dir(self) -> Path:
        return self.models_override or self.data / "models"

    @property
    def requests_db(self) -> Path:
        return self.data / "requests.sqlite"

    @property
    def responses_db(self) -> Path:
        """Responses the Responses API stored (app.service.dialects.response_store)."""
        return self.data / "responses.sqlite"

    @property
    def metrics_db(self) -> Path:
        """History of the metrics pipeline's series (app.service.metrics.series_history)."""
        return self.data / "metrics.sqlite"

    @property
    def bench_dir(self) -> Path:
        """Benchmark cards, JSON and Markdown (app.bench)."""
        return self.data / "bench"

    @property
    def calibration_db(self) -> Path:
        """Predicted against measured memory of past launches (app.planner.calibration)."""
        return self.data / "calibration.sqlite"

    @property
    def bandwidth_cache(self) -> Path:
        return self.cache / "memory-bandwidth.json"

    @property
    def engine_builds(self) -> Path:
        """Engines ModelDeck built itself, one directory per build (app.installs.llama_server_build)."""
        return self.data / "engine-builds"

    @property
    def engine_logs(self) -> Path:
        return self.logs / "engines"

    @property
    def engine_records(self) -> Path:
        return self.state / "engines"

    @property
    def service_file(self) -> Path:
        return self.state / "service.json"

    @property
    def control_token_file(self) -> Path:
        return self.state / "control-token"

    @property
    def service_lock(self) -> Path:
        """Held by the data folder's one service from before it touches anything until after it withdraws."""
        return self.state / "service.lock"

    @property
    def api_key_file(self) -> Path:
        return self.config / "api-key"

    @property
    def tls_dir(self) -> Path:
        """The endpoint's self-signed certificate and its key (app.service.http.tls)."""
        return self.config / "tls"

    @property
    def service_log(self) -> Path:
        return self.logs / "service.log"


def app_paths() -> AppPaths:
    """The directories for this user, honouring $MODELDECK_HOME. Nothing is created here."""
    home = os.environ.get(HOME_ENV)
    if home:
        root = Path(home).expanduser().resolve()
        return AppPaths(root / "config", root / "data", root / "logs", root / "cache", root / "state")
    return AppPaths(
        Path(platformdirs.user_config_dir(APP_NAME)),
        Path(platformdirs.user_data_dir(APP_NAME)),
        Path(platformdirs.user_log_dir(APP_NAME)),
        Path(platformdirs.user_cache_dir(APP_NAME)),
        Path(platformdirs.user_state_dir(APP_NAME)),
    )


PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600


def _tighten(path: Path, mode: int) -> None:
    """Take group and other access away from `path` (made by an earlier version, or under a loose umask)."""
    status = path.lstat()
    if os.name == "posix" and not stat.S_ISLNK(status.st_mode) and stat.S_IMODE(status.st_mode) & 0o077:
        path.chmod(mode)


def make_private_dirs(paths: AppPaths) -> None:
    """ModelDeck's own folders, created for this user only (0700), and tightened when they already exist: they hold
    prompts (the request log with --log-request-text), keys and tokens."""
    home = os.environ.get(HOME_ENV)
    if home:  # everything under one folder: created private when it is created here (the user may have chosen it)
        Path(home).expanduser().mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
    for directory in (paths.config, paths.data, paths.logs, paths.cache, paths.state):
        directory.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
        _tighten(directory, PRIVATE_DIR_MODE)


def make_private_file(path: Path) -> None:
    """Make sure `path` is a file only this user can read and write (0600) before a library opens it by name (SQLite
    gives its -wal and -shm files the database's mode), without changing its content or following a link."""
    flags = os.O_WRONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
    os.close(os.open(path, flags, PRIVATE_FILE_MODE))
    for existing in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        if existing.exists():
            _tighten(existing, PRIVATE_FILE_MODE)
