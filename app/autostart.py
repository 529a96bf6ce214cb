"""Start ModelDeck's window when the user logs in: an XDG autostart entry on Linux, a LaunchAgent on macOS, a value
under the HKCU Run key on Windows. Each platform's entry is built by a pure function, so all three can be checked
anywhere; `enable` and `disable` write or remove the one of this platform."""

from __future__ import annotations

import os
import plistlib
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from app.self_command import modeldeck_command
from engines.atomic_files import write_atomically

APP_ID = "io.modeldeck.ModelDeck"
DESKTOP_FILE = "modeldeck.desktop"
RUN_KEY = r"Software\Microsoft\Windows\CurrentVersion\Run"
RUN_VALUE = "ModelDeck"


class AutostartError(OSError):
    """The login entry could not be written or removed; the message says why."""


@dataclass(frozen=True)
class RegistryEntry:
    """A value under HKEY_CURRENT_USER: key path, value name, command line."""

    key: str
    name: str
    value: str


def launch_command() -> list[str]:
    """What starts the window: the `modeldeck` script next to this interpreter, else `python -m app`."""
    script = Path(sys.executable).with_name("modeldeck.exe" if sys.platform == "win32" else "modeldeck")
    if script.exists():
        return [str(script)]
    found = shutil.which("modeldeck")
    return [found] if found else modeldeck_command()


def _desktop_quote(argument: str) -> str:
    # The Desktop Entry spec's Exec quoting: double quotes, with ", `, $ and \ escaped inside them.
    if argument and not any(c in argument for c in " \t\n\"'\\><~|&;$*?#()`"):
        return argument
    escaped = "".join("\\" + c if c in '"`$\\' else c for c in argument)
    return f'"{escaped}"'


def desktop_entry(command: list[str]) -> str:
    """An XDG autostart .desktop file that runs `command`."""
    exec_line = " ".join(_desktop_quote(argument) for argument in command)
    return "\n".join([
        "[Desktop Entry]", "Type=Application", "Name=ModelDeck", "Comment=Serve language models locally",
        f"Exec={exec_line}", "Icon=modeldeck", "Terminal=false", "X-GNOME-Autostart-enabled=true", "",
    ])  # fmt: skip


def launch_agent(command: list[str]) -> bytes:
    """A macOS LaunchAgent property list that runs `command` at login."""
    agent = {"Label": APP_ID, "ProgramArguments": command, "RunAtLoad": True, "ProcessType": "Interactive"}
    return plistlib.dumps(agent)


def run_key_entry(command: list[str]) -> RegistryEntry:
    """The HKCU Run value that runs `command` at login."""
    return RegistryEntry(RUN_KEY, RUN_VALUE, subprocess.list2cmdline(command))


def linux_entry_path(environ: dict[str, str] | None = None) -> Path:
    environ = dict(os.environ) if environ is None else environ
    config = environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config) / "autostart" / DESKTOP_FILE


def macos_agent_path() -> Path:
    return Path.home() / "Library" / "LaunchAgents" / f"{APP_ID}.plist"


def is_enabled() -> bool:
    if sys.platform == "win32":
        return _windows_value() is not None
    return (macos_agent_path() if sys.platform == "darwin" else linux_entry_path()).exists()


def enable(command: list[str] | None = None) -> Path | RegistryEntry:
    """Write this platform's login entry; where it was written."""
    command = command or launch_command()
    try:
        if sys.platform == "win32":
            entry = run_key_entry(command)
            _windows_set(entry)
            return entry
        path = macos_agent_path() if sys.platform == "darwin" else linux_entry_path()
        content = launch_agent(command) if sys.platform == "darwin" else desktop_entry(command).encode()
        write_atomically(path, content, 0o644)  # as the desktop's other login entries: readable by all
        return path
    except OSError as exc:
        raise AutostartError(f"could not set ModelDeck to start at login: {exc.strerror or exc}") from exc


def disable() -> bool:
    """Remove this platform's login entry; False when there was none."""
    try:
        if sys.platform == "win32":
            return _windows_delete()
        path = macos_agent_path() if sys.platform == "darwin" else linux_entry_path()
        if not path.exists():
            return False
        path.unlink()
        return True
    except OSError as exc:
        raise AutostartError(f"could not stop ModelDeck starting at login: {exc.strerror or exc}") from exc


def describe(entry: Path | RegistryEntry) -> str:
    if isinstance(entry, RegistryEntry):
        return f"HKEY_CURRENT_USER\\{entry.key}\\{entry.name} = {entry.value}"
    return str(entry)


# Windows registry (winreg exists only there; mypy checks these bodies only for win32) ---------------------------

_NOT_WINDOWS = "the registry exists only on Windows"


def _windows_set(entry: RegistryEntry) -> None:  # pragma: no cover - Windows only
    if sys.platform != "win32":
        raise AutostartError(_NOT_WINDOWS)
    else:
        import winreg

        with winreg.CreateKey(winreg.HKEY_CURRENT_USER, entry.key) as key:
            winreg.SetValueEx(key, entry.name, 0, winreg.REG_SZ, entry.value)


def _windows_value() -> str | None:  # pragma: no cover - Windows only
    if sys.platform != "win32":
        raise AutostartError(_NOT_WINDOWS)
    else:
        import winreg

        try:
            with winreg.OpenKey(winreg.HKEY_CURRENT_USER, RUN_KEY) as key:
                value, _kind = winreg.QueryValueEx(key, RUN_VALUE)
                return str(value)
        except FileNotFoundError:
            return None


def _windows_delete() -> bool:  # pragma: no cover - Windows only
    if sys.platform != "win32":
        raise AutostartError(_NOT_WINDOWS)
    else:
        import winreg

        try:
            with winreg.OpenKey(winreg.HKEY_CURRENT_USER, RUN_KEY, 0, winreg.KEY_SET_VALUE) as key:
                winreg.DeleteValue(key, RUN_VALUE)
        except FileNotFoundError:
            return False
        return True
