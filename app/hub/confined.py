"""Deleting inside one folder without following links: neither the entry removed nor any folder on the way to it.

A path that crosses a symbolic link leads wherever the link points, and the cache and models folders are shared with
other tools: a snapshot link or a snapshot folder replaced by a link must never make a delete reach outside. Each
folder on the way is opened relative to the one before it with O_NOFOLLOW, and the entry is removed relative to its
folder, so a link swapped in meanwhile is refused too. Where the system has no `dir_fd` (Windows) every part is
checked with lstat instead.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path, PurePath

_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)
_HAS_DIR_FD = {os.open, os.unlink, os.rmdir, os.stat, os.readlink} <= os.supports_dir_fd


class ConfinedError(Exception):
    """The path leaves its folder, or crosses a link on the way."""


def _parts(relative: PurePath) -> tuple[str, ...]:
    parts = relative.parts
    if not parts or relative.is_absolute() or any(part in ("", ".", "..") for part in parts):
        raise ConfinedError(f"{relative} is not a path inside the folder")
    return parts


@contextlib.contextmanager
def _folder(root: Path, parts: tuple[str, ...]) -> Iterator[int]:
    """A descriptor of root/parts..., every part opened without following a link (the root is trusted)."""
    fd = os.open(root, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        for part in parts:
            try:
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                raise ConfinedError(f"{root.joinpath(*parts)}: {part} is not a folder ({exc.strerror})") from exc
            os.close(fd)
            fd = child
        yield fd
    finally:
        os.close(fd)


def _check_no_link(root: Path, parts: tuple[str, ...]) -> None:
    path = root
    for part in parts:
        path = path / part
        if path.is_symlink():
            raise ConfinedError(f"{path} is a link; ModelDeck does not delete through links")


def entry_kind(root: Path, relative: PurePath) -> str | None:
    """What root/relative itself is (a link is not followed): link, file, folder or other; None when absent."""
    parts = _parts(relative)
    try:
        if _HAS_DIR_FD:
            with _folder(root, parts[:-1]) as fd:
                mode = os.stat(parts[-1], dir_fd=fd, follow_symlinks=False).st_mode
        else:
            _check_no_link(root, parts[:-1])
            mode = os.lstat(root.joinpath(*parts)).st_mode
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(mode):
        return "link"
    return "file" if stat.S_ISREG(mode) else "folder" if stat.S_ISDIR(mode) else "other"


def read_link(root: Path, relative: PurePath) -> str:
    """The target written in the link root/relative (not resolved)."""
    parts = _parts(relative)
    if _HAS_DIR_FD:
        with _folder(root, parts[:-1]) as fd:
            return os.readlink(parts[-1], dir_fd=fd)
    _check_no_link(root, parts[:-1])
    return os.readlink(root.joinpath(*parts))


def remove(root: Path, relative: PurePath) -> bool:
    """Remove the file or link root/relative itself (never what a link points at); False when it was absent."""
    parts = _parts(relative)
    try:
        if _HAS_DIR_FD:
            with _folder(root, parts[:-1]) as fd:
                os.unlink(parts[-1], dir_fd=fd)
        else:
            _check_no_link(root, parts[:-1])
            os.unlink(root.joinpath(*parts))
    except FileNotFoundError:
        return False
    return True


def remove_empty_folder(root: Path, relative: PurePath) -> bool:
    """Remove the folder root/relative if it is empty (and not a link); whether it was removed."""
    parts = _parts(relative)
    try:
        if _HAS_DIR_FD:
            with _folder(root, parts[:-1]) as fd:
                mode = os.stat(parts[-1], dir_fd=fd, follow_symlinks=False).st_mode
                if stat.S_ISDIR(mode):
                    os.rmdir(parts[-1], dir_fd=fd)
                    return True
                return False
        _check_no_link(root, parts)
        os.rmdir(root.joinpath(*parts))
        return True
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTEMPTY, errno.EEXIST):  # absent, or not empty: kept
            return False
        raise
