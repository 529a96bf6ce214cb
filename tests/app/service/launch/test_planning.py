"""The launch planner's reading of GGUF headers, on real files: a checked start (the API's check, then the start)
reads the header once, and a file changed between the two is read again."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from app.hardware.profile import HardwareProfile
from app.paths import AppPaths
from app.service.launch import planning
from app.service.launch.planning import LaunchPlanner
from engines.gguf import GGUFError, GGUFInfo, read_gguf_info
from tests.support.synthetic import model_file


def _no_hardware() -> HardwareProfile:
    raise AssertionError("reading a header asks nothing of the hardware")


def test_the_header_is_read_once_until_the_file_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[Path] = []

    def counted(path: Path) -> GGUFInfo:
        reads.append(path)
        return read_gguf_info(path)

    monkeypatch.setattr(planning, "read_gguf_info", counted)
    planner = LaunchPlanner(AppPaths(*(tmp_path,) * 5), {}, _no_hardware)
    first, second = model_file(tmp_path, "first"), model_file(tmp_path, "second")

    info = planner.gguf_header(first)
    assert planner.gguf_header(first) is info and reads == [first]
    planner.gguf_header(second)
    assert reads == [first, second], "another file is another read"

    stat = second.stat()
    os.utime(second, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    planner.gguf_header(second)
    assert reads == [first, second, second], "a file changed since is read again"

    second.write_bytes(b"not a model")
    with pytest.raises(GGUFError):
        planner.gguf_header(second)
    second.unlink()
    with pytest.raises(GGUFError, match="cannot be read"):
        planner.gguf_header(second)
