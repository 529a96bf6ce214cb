"""`modeldeck --version`: the version and the commit it was built from, from git in a checkout or from the
build's record in a package."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from app import __version__, version
from tests.support.service import REPO


def test_version_from_a_checkout_names_the_head_commit() -> None:
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
    done = subprocess.run([sys.executable, "-m", "app", "--version"], capture_output=True, text=True, timeout=60,
                          cwd=REPO)  # fmt: skip
    assert done.returncode == 0
    assert done.stdout.strip() == f"modeldeck {__version__} (commit {head.stdout.strip()[:12]}, checkout)"


def test_a_package_reads_its_commit_from_the_build_record(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    record = tmp_path / "build_info.json"
    record.write_text(json.dumps({"commit": "f" * 40, "built": "2026-12-04T00:00:00Z"}))
    monkeypatch.setattr(version, "BUILD_INFO", record)
    found = version.provenance()
    assert (found.commit, found.source) == ("f" * 40, "package")


@pytest.mark.parametrize("text", [b"{not json", b"[" * 100_000, b"\xff", b"[1]"])
def test_an_unreadable_record_falls_back_to_git(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, text: bytes) -> None:
    """json.loads raised RecursionError on a record nested too deeply: a traceback from `modeldeck --version`."""
    record = tmp_path / "build_info.json"
    record.write_bytes(text)
    monkeypatch.setattr(version, "BUILD_INFO", record)
    assert version.provenance().source == "checkout"
