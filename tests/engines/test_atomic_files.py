"""Files written whole (engines/atomic_files.py), on a real disk: a failed write leaves the old file and nothing
else, a link is replaced and not written through, and each file gets the mode it is written with."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from engines.atomic_files import write_atomically
from tests.support.full_disk import errno_of_a_full_disk


@pytest.fixture
def loose_umask() -> Iterator[None]:
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_write_that_fails_part_way_leaves_the_old_file_whole(tmp_path: Path) -> None:
    path = tmp_path / "engines" / "record.json"
    write_atomically(path, '{"old": true}')
    code = (
        "from pathlib import Path; from engines.atomic_files import write_atomically; "
        f"write_atomically(Path({str(path)!r}), 'x' * 100_000)"
    )
    assert errno_of_a_full_disk(code) == str(errno.EFBIG)
    assert path.read_text(encoding="utf-8") == '{"old": true}'
    assert list(path.parent.iterdir()) == [path], "the temporary file is removed"


def test_a_private_file_replaces_a_link_without_writing_through_it(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("untouched")
    path = tmp_path / "engines" / "options.yaml"
    path.parent.mkdir()
    path.symlink_to(victim)
    write_atomically(path, "mine")
    assert victim.read_text() == "untouched"
    assert not path.is_symlink() and path.read_text() == "mine"
    assert _mode(path) == 0o600


@pytest.mark.usefixtures("loose_umask")
def test_a_file_gets_its_mode_and_a_private_one_private_folders(tmp_path: Path) -> None:
    private, shared = tmp_path / "private" / "key.pem", tmp_path / "shared" / "cert.pem"
    write_atomically(private, b"key")
    write_atomically(shared, b"cert", 0o644)
    assert (_mode(private), _mode(private.parent)) == (0o600, 0o700)
    assert (_mode(shared), _mode(shared.parent)) == (0o644, 0o755)
    assert shared.read_bytes() == b"cert"
