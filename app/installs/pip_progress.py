"""What `pip install` is doing, read line by line from its output, for a progress display.

pip says what it collects, downloads (with the size) and installs on lines of their own; from pip 24.1,
`--progress-bar raw` adds `Progress N of M` lines with the bytes of the file being downloaded.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_UNITS = {"B": 1, "kB": 1e3, "KB": 1e3, "MB": 1e6, "GB": 1e9}
_DOWNLOADING = re.compile(r"^\s*Downloading (?P<file>\S+)(?: \((?P<size>[\d.]+) (?P<unit>[kKMG]?B)\))?")
_RAW = re.compile(r"^\s*Progress (?P<done>\d+) of (?P<total>\d+)\s*$")
_COLLECTING = re.compile(r"^\s*(?:Collecting|Processing) (?P<what>\S+)")  # Processing: a local file
_INSTALLING = re.compile(r"^\s*Installing collected packages: (?P<names>.+)$")
_DONE = re.compile(r"^\s*Successfully installed (?P<names>.+)$")
RAW_PROGRESS_PIP = (24, 1)


@dataclass(frozen=True)
class PipStep:
    """One thing pip reported: a phase (collecting, downloading, installing, installed) and, while downloading,
    the bytes of the current file (None where pip does not say)."""

    phase: str
    detail: str
    done: int | None = None
    total: int | None = None


def parse_pip_line(line: str) -> PipStep | None:
    """The step one line of pip's output reports, or None for lines that report none (warnings, requirements)."""
    if match := _RAW.match(line):
        return PipStep("downloading", "", int(match["done"]), int(match["total"]))
    if match := _DOWNLOADING.match(line):
        size = int(float(match["size"]) * _UNITS[match["unit"]]) if match["size"] else None
        return PipStep("downloading", match["file"].rsplit("/", 1)[-1], 0, size)
    if match := _COLLECTING.match(line):
        return PipStep("collecting", match["what"].rsplit("/", 1)[-1])
    if match := _INSTALLING.match(line):
        names = [name.strip() for name in match["names"].split(",")]
        return PipStep(
            "installing", f"{len(names)} packages: {', '.join(names[:6])}{', ...' if len(names) > 6 else ''}"
        )
    if match := _DONE.match(line):
        return PipStep("installed", match["names"])
    return None


def pip_version(text: str) -> tuple[int, int] | None:
    """(major, minor) from `pip --version` output ("pip 24.2 from ... (python 3.11)")."""
    match = re.match(r"pip (\d+)\.(\d+)", text.strip())
    return (int(match[1]), int(match[2])) if match else None
