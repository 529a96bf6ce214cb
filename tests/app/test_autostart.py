"""Start at login: the Linux XDG autostart entry written and removed for real in a temporary XDG_CONFIG_HOME, the
macOS LaunchAgent and the Windows Run-key value checked by their generated content (no Mac or Windows here)."""

from __future__ import annotations

import configparser
import plistlib
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from app import autostart

COMMAND = ["/opt/Model Deck/bin/modeldeck"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the XDG entry is written on Linux only")
def test_linux_entry_is_written_and_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert not autostart.is_enabled()
    where = autostart.enable()
    assert where == tmp_path / "xdg" / "autostart" / "modeldeck.desktop" and autostart.is_enabled()
    entry = configparser.ConfigParser(interpolation=None)
    entry.read(where, encoding="utf-8")
    desktop = entry["Desktop Entry"]
    assert desktop["Type"] == "Application" and desktop["Name"] == "ModelDeck"
    # The Exec line runs this ModelDeck: its words are the launch command (the spec's quoting is the shell's here).
    assert shlex.split(desktop["Exec"]) == autostart.launch_command()
    result = subprocess.run([*shlex.split(desktop["Exec"]), "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "serve" in result.stdout
    assert autostart.disable() and not where.exists() and not autostart.disable()


def test_desktop_entry_quotes_paths_with_spaces() -> None:
    text = autostart.desktop_entry([*COMMAND, "--flag"])
    assert 'Exec="/opt/Model Deck/bin/modeldeck" --flag' in text.splitlines()
    assert autostart.desktop_entry(['/a/b"c$']).splitlines()[4] == 'Exec="/a/b\\"c\\$"'


def test_macos_launch_agent_content() -> None:
    agent = plistlib.loads(autostart.launch_agent(COMMAND))
    assert agent == {
        "Label": "io.modeldeck.ModelDeck", "ProgramArguments": COMMAND, "RunAtLoad": True, "ProcessType": "Interactive",
    }  # fmt: skip


def test_windows_run_key_content() -> None:
    entry = autostart.run_key_entry(["C:\\Program Files\\ModelDeck\\modeldeck.exe"])
    assert entry.key == r"Software\Microsoft\Windows\CurrentVersion\Run" and entry.name == "ModelDeck"
    assert entry.value == '"C:\\Program Files\\ModelDeck\\modeldeck.exe"'
    assert "HKEY_CURRENT_USER\\Software" in autostart.describe(entry)
