"""The CLI's parts without a service: the one progress line, the one size reader, and a chat's messages."""

from __future__ import annotations

import io
import subprocess
import sys
from collections.abc import Callable

import pytest

from app.cli.chat import read_message
from app.cli.progress import ProgressBar
from app.cli.sizes import parse_size
from app.cli.vllm import _show_progress
from app.task import Progress
from tests.support.service import REPO


def test_one_progress_line_for_bytes_steps_and_percent() -> None:
    out = io.StringIO()  # not a terminal: one line per step, and the last one
    bar = ProgressBar(out)
    bar(Progress(50_000_000, 100_000_000, 5e6, 10.0, "model.gguf"))
    bar(Progress(60_000_000, 100_000_000, 5e6, 8.0, "model.gguf"))  # same step within 5 s: not repeated
    bar(Progress(100_000_000, 100_000_000, 5e6, 0.0, "model.gguf", finished=True))
    assert out.getvalue().splitlines() == [
        "[###############---------------]  50.0% 50.0/100.0 MB    5.0 MB/s ETA 00:10",
        "[##############################] 100.0% 100.0/100.0 MB    5.0 MB/s ETA 00:00",
    ]
    build = ProgressBar(io.StringIO(), width=10, unit="percent")
    assert build.line(Progress(45, 100, None, None, "compiling")) == "[####------]  45.0% compiling"
    assert build.line(Progress(0, 0, None, None, "configuring")) == "configuring"  # no total: no bar


def test_the_vllm_install_shows_a_bar_only_while_a_file_downloads() -> None:
    out = io.StringIO()
    show = _show_progress(ProgressBar(out, width=10))
    show(Progress(2_000_000, 4_000_000, None, None, "downloading torch-2.14.0.whl"))
    show(Progress(4_000_000, 4_000_000, None, None, "installing torch"))  # the last file's total is not this step's
    assert out.getvalue().splitlines() == ["[#####-----]  50.0% 2.0/4.0 MB     -- MB/s ETA --:--", "installing torch"]


@pytest.mark.parametrize(
    ("text", "default_unit", "expected"),
    [("512M", 1, 512 << 20), ("8G", 1, 8 << 30), ("8gib", 1, 8 << 30), ("1.5T", 1, int(1.5 * 2**40)),
     ("1500000000", 1, 1_500_000_000), ("80", 2**30, 80 << 30), ("24GB", 2**30, 24 << 30), ("0.5", 2**30, 1 << 29),
     ("1.5", 1, 2)],
)  # fmt: skip
def test_sizes(text: str, default_unit: int, expected: int) -> None:
    assert parse_size(text, default_unit) == expected


@pytest.mark.parametrize("text", ["", "G", "8X", "-1G", "0", "0.5", "nan", "inf"])
def test_bad_sizes_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="size"):
        parse_size(text)


def test_both_size_options_refuse_the_same_way() -> None:
    for args in (["serve", "--max-memory", "8X"], ["export", "m", "--format", "k8s", "--gpu-memory", "8X"]):
        done = subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True, timeout=60,
                              cwd=REPO, check=False)  # fmt: skip
        assert done.returncode == 2 and "not a size: '8X' (examples: 512M, 8G)" in done.stderr, args


def lines_from(*lines: str) -> Callable[[str], str | None]:
    """A `read_line` for `read_message` that gives these lines, then the end of input."""
    given = iter(lines)
    return lambda _prompt: next(given, None)


@pytest.mark.parametrize(
    ("lines", "message"),
    [(["hello"], "hello"), (['"""one line"""'], "one line"), (['"""', "a", "", "b", '"""'], "a\n\nb"),
     (['"""a', 'b"""'], "a\nb"), (["a \\", "b\\", "c"], "a \nb\nc"), (["a\\"], "a"), (['"""', "cut off"], "cut off"),
     ([], None)],
)  # fmt: skip
def test_chat_messages_span_lines_by_backslash_or_triple_quotes(lines: list[str], message: str | None) -> None:
    assert read_message(lines_from(*lines)) == message
