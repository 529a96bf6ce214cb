"""Where ModelDeck keeps its files: platformdirs' user directories, or everything under $MODELDECK_HOME."""

from __future__ import annotations

import os
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
    def metrics_db(self) -> Path:
        """History of the metrics pipeline's series (app.service.series_history)."""
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
    def api_key_file(self) -> Path:
        return self.config / "api-key"

    @property
    def tls_dir(self) -> Path:
        """The endpoint's self-signed certificate and its key (app.service.tls)."""
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


def write_private(path: Path, text: str) -> None:
    """Write a file readable only by this user, created with that mode (never briefly world-readable)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(tmp, path)
