"""Numbers that cannot work (ports, TTLs, counts, sizes) are refused where they are read: on the command line in
one line naming the flag or the variable, and in the benchmark options the service builds from JSON."""

from __future__ import annotations

import pytest

from app.cli.entry import _parser


def refusal(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """The parser's error line for `argv`, which it must refuse with exit code 2."""
    with pytest.raises(SystemExit) as exited:
        _parser().parse_args(argv)
    assert exited.value.code == 2, argv
    return capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.parametrize("seconds", ["0", "-5", "nan", "inf", "soon"])
def test_serve_refuses_an_idle_ttl_that_is_not_positive(capsys: pytest.CaptureFixture[str], seconds: str) -> None:
    line = refusal(capsys, "serve", "--idle-ttl", seconds)
    assert line.endswith(f"argument --idle-ttl: expected a positive number of seconds, got {seconds!r}")
