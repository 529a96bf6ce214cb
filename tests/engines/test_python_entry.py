"""Child processes of a packaged (frozen) ModelDeck: the executable runs modules and scripts through entry-point
flags, since it takes no `-m`. The stand-in for the frozen executable is a real script that does what the package's
entry does first (installers/pyinstaller/entry.py); the packaged build itself is tested in tests/packaging."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from engines import python_entry
from tests.support.service import REPO

FROZEN_LIKE = """
import sys
from engines.python_entry import run_entry_point
if not run_entry_point(sys.argv):
    print("modeldeck main", sys.argv[1:])
"""


def test_a_source_install_runs_python_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(sys, "frozen", raising=False)
    assert python_entry.module_command("llama_cpp.server") == [sys.executable, "-m", "llama_cpp.server"]
    assert python_entry.script_command(Path("/x/w.py")) == [sys.executable, "-I", "-S", "/x/w.py"]


def test_a_frozen_build_runs_its_own_executable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    assert python_entry.module_command("m") == [sys.executable, python_entry.RUN_MODULE, "m"]
    assert python_entry.script_command(Path("/x/w.py")) == [sys.executable, python_entry.RUN_SCRIPT, "/x/w.py"]


def test_the_entry_point_runs_a_module_and_a_script_with_their_arguments(tmp_path: Path) -> None:
    entry = tmp_path / "frozen_like.py"
    entry.write_text(FROZEN_LIKE)
    script = tmp_path / "script.py"
    script.write_text("import sys\nprint('script', __name__, sys.argv)\n")

    def run(*args: str) -> str:
        done = subprocess.run([sys.executable, str(entry), *args], capture_output=True, text=True, timeout=60,
                              cwd=REPO, env={"PYTHONPATH": str(REPO)}, check=True)  # fmt: skip
        return done.stdout.strip()

    assert run(python_entry.RUN_MODULE, "platform", "--terse").startswith("Linux")
    assert run(python_entry.RUN_SCRIPT, str(script), "a", "b") == f"script __main__ ['{script}', 'a', 'b']"
    assert run("serve", "--port", "1") == "modeldeck main ['serve', '--port', '1']"
