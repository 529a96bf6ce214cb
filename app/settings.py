"""The user's settings: one typed record with a schema version, kept as JSON in the config directory.

Written atomically (a temporary file renamed over the old one), so a crash never leaves half a file. A file that
cannot be read is set aside as `settings.json.bad`, with a sentence saying why, and the defaults are used: the
user loses nothing they could still recover by hand, and ModelDeck still starts.
"""

from __future__ import annotations

import errno
import ipaddress
import json
import math
import os
import stat
import urllib.parse
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from app.bad_files import set_aside
from app.bounded_json import load_json
from app.paths import AppPaths
from engines.atomic_files import write_atomically

SCHEMA_VERSION = 1
SETTINGS_FILE = "settings.json"
THEMES = ("system", "light", "dark")
MAX_TTL_S = 30 * 24 * 3600.0
MAX_LOSS_PCT = 1000.0
DEFAULT_NAME_MAX = 255  # the longest file name of most file systems, where the system does not say
# Changes to these apply when the service next starts; the others are the window's and apply at once.
RESTART_FIELDS = frozenset({"gateway_port", "control_port", "bind_address", "cors_origins", "idle_ttl_s", "models_dir"})


class SettingsError(ValueError):
    """A value that cannot be a setting; `field` names it and the message says what is expected."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass(frozen=True)
class Settings:
    """What the user chose. None means "not chosen": the built-in default applies."""

    gateway_port: int = 8642
    control_port: int = 0  # 0: any free loopback port, published in the discovery file
    bind_address: str = "127.0.0.1"
    cors_origins: tuple[str, ...] = ()
    idle_ttl_s: float | None = None  # None: engines stay loaded until stopped
    models_dir: str | None = None  # None: <data dir>/models
    theme: str = "system"
    start_at_login: bool = False
    close_to_tray: bool | None = None  # None: not asked yet
    # A variant whose measured perplexity increase (a quality card) passes this ranks lower; None: no threshold.
    max_quality_loss_pct: float | None = None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["cors_origins"] = list(self.cors_origins)
        return data

    def updated(self, changes: dict[str, Any]) -> Settings:
        """A copy with `changes` applied, each checked; raises SettingsError on the first bad one."""
        known = {f.name for f in fields(self)}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise SettingsError(unknown[0], f"unknown setting (known: {', '.join(sorted(known))})")
        return replace(self, **{name: _check(name, value) for name, value in changes.items()})


@dataclass(frozen=True)
class LoadedSettings:
    settings: Settings
    problem: str | None = None  # why the file could not be used, when it could not


def settings_file(paths: AppPaths) -> Path:
    return paths.config / SETTINGS_FILE


def load_settings(paths: AppPaths) -> LoadedSettings:
    """The saved settings, the defaults when there are none, or the defaults and a problem for a bad file."""
    path = settings_file(paths)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return LoadedSettings(Settings())
    except OSError as exc:
        return LoadedSettings(Settings(), f"cannot read {path}: {exc.strerror or exc}; using the defaults")
    try:
        data = load_json(raw)
        if not isinstance(data, dict):
            raise SettingsError("settings", "the file must hold a JSON object")
        version = data.pop("schema_version", SCHEMA_VERSION)
        if version != SCHEMA_VERSION:
            raise SettingsError("schema_version", f"version {version!r} is not one this ModelDeck reads")
        return LoadedSettings(Settings().updated(data))
    except ValueError as exc:  # BadJson: not UTF-8, not JSON, or nested past its bound; or a SettingsError
        bad = set_aside(path)
        return LoadedSettings(Settings(), f"{path} is not valid ({exc}); kept it as {bad.name} and used the defaults")


def save_settings(paths: AppPaths, settings: Settings) -> None:
    """Write the settings atomically: readers see the old file or the new one, never a part."""
    text = json.dumps({"schema_version": SCHEMA_VERSION, **settings.to_dict()}, indent=2) + "\n"
    write_atomically(settings_file(paths), text)


def with_models_dir(paths: AppPaths, settings: Settings) -> AppPaths:
    """The paths, with the models directory the user chose."""
    return replace(paths, models_override=Path(settings.models_dir)) if settings.models_dir else paths


def is_loopback_address(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# Checks, one per setting ---------------------------------------------------------------------------------


def _check(name: str, value: Any) -> Any:
    return _CHECKS[name](name, value)


def _port(name: str, value: Any, lowest: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lowest <= value <= 65535:
        raise SettingsError(name, f"must be a whole number from {lowest} to 65535, got {value!r}")
    return value


def _bind(name: str, value: Any) -> str:
    if value == "localhost":
        return "127.0.0.1"
    try:
        if not isinstance(value, str):  # ip_address(0) is 0.0.0.0: a number must not open the endpoint to the LAN
            raise ValueError
        return str(ipaddress.ip_address(value))
    except ValueError:
        raise SettingsError(name, f"must be an IP address such as 127.0.0.1 or 0.0.0.0, got {value!r}") from None


def _origins(name: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise SettingsError(name, "must be a list of origins such as http://localhost:3000")
    for origin in value:
        problem = origin_problem(origin)
        if problem is not None:
            raise SettingsError(name, problem)
    return tuple(dict.fromkeys(value))


def origin_problem(origin: str) -> str | None:
    """Why `origin` cannot be allowed for CORS (`null`, a wildcard, a path), or None: the one rule the settings
    and `serve --cors-origin` share. `null` is what sandboxed frames and file: pages send, so any page can."""
    parts = urllib.parse.urlsplit(origin)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.path or origin == "*":
        return f"{origin!r} is not an origin (scheme://host[:port], no wildcard, no path, not null)"
    return None


def _ttl(name: str, value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= MAX_TTL_S:
        raise SettingsError(name, f"must be a number of seconds from 1 to {MAX_TTL_S:.0f}, or null (never)")
    if math.isnan(value):
        raise SettingsError(name, "must be a number")
    return float(value)


def _folder(name: str, value: Any) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str) or not Path(value).expanduser().is_absolute():
        raise SettingsError(name, f"must be a full path to a folder, got {value!r}")
    folder = Path(value).expanduser()
    problem = _folder_problem(folder)
    if problem is not None:
        raise SettingsError(name, problem)
    return str(folder)


def _folder_problem(folder: Path) -> str | None:
    """Why `folder` is no folder and can never be made one; None when it is one or can be made."""
    existing = folder
    while True:  # up to the nearest part that exists: what is below it is to be made
        try:
            mode = existing.stat().st_mode
            break
        except OSError as exc:
            if exc.errno not in (errno.ENOENT, errno.ENOTDIR, errno.ENAMETOOLONG) or existing.parent == existing:
                return f"{existing} cannot be used: {exc.strerror or exc}"
            existing = existing.parent
    if not stat.S_ISDIR(mode):
        return f"{existing} exists and is not a folder"
    name_max = _path_limit(existing, "PC_NAME_MAX") or DEFAULT_NAME_MAX
    for part in folder.relative_to(existing).parts:
        if (size := len(os.fsencode(part))) > name_max:
            shown = repr(part if len(part) <= 20 else part[:20] + "\N{HORIZONTAL ELLIPSIS}")
            return f"the folder name {shown} is {size} bytes long, more than the {name_max} the file system allows"
    path_max = _path_limit(existing, "PC_PATH_MAX")
    if path_max and (size := len(os.fsencode(folder))) >= path_max:
        return f"the path is {size} bytes long; the file system allows fewer than {path_max}"
    return None


def _path_limit(folder: Path, name: str) -> int | None:
    """A length limit of the file system holding `folder`; None where the system does not say (Windows)."""
    try:
        limit = os.pathconf(folder, name)
    except (AttributeError, ValueError, OSError):  # no pathconf, a name this system lacks, or no answer
        return None
    return limit if limit > 0 else None


def _choice(name: str, value: Any) -> str:
    if value not in THEMES:
        raise SettingsError(name, f"must be one of {', '.join(THEMES)}, got {value!r}")
    return str(value)


def _flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise SettingsError(name, f"must be true or false, got {value!r}")
    return value


def _optional_flag(name: str, value: Any) -> bool | None:
    return None if value is None else _flag(name, value)


def _optional_percent(name: str, value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= MAX_LOSS_PCT:
        raise SettingsError(name, f"must be a percentage from 0 to {MAX_LOSS_PCT:g}, or null for none; got {value!r}")
    return float(value)


_CHECKS: dict[str, Callable[[str, Any], Any]] = {
    "gateway_port": lambda n, v: _port(n, v, 1),
    "control_port": lambda n, v: _port(n, v, 0),
    "bind_address": _bind,
    "cors_origins": _origins,
    "idle_ttl_s": _ttl,
    "models_dir": _folder,
    "theme": _choice,
    "start_at_login": _flag,
    "close_to_tray": _optional_flag,
    "max_quality_loss_pct": lambda n, v: _optional_percent(n, v),
}
