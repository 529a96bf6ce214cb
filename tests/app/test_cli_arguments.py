"""Numbers that cannot work (ports, TTLs, counts, sizes) are refused where they are read: on the command line in
one line naming the flag or the variable, and in the benchmark options the service builds from JSON."""

from __future__ import annotations

import pytest

from app.cli.entry import _parser
from app.cli.service_link import service_on_demand
from app.client import ServiceUnavailable, port_from_env
from app.paths import AppPaths
from tests.app.test_cli import modeldeck


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


@pytest.mark.parametrize(
    ("flag", "value", "words"),
    [("--port", "99999", "must be from 1 to 65535, got 99999"), ("--port", "0", "must be from 1 to 65535, got 0"),
     ("--port", "http", "not a whole number: 'http'"), ("--control-port", "-1", "must be from 0 to 65535, got -1"),
     ("--control-port", "65536", "must be from 0 to 65535, got 65536")],
)  # fmt: skip
def test_serve_refuses_a_port_out_of_range(
    capsys: pytest.CaptureFixture[str], flag: str, value: str, words: str
) -> None:
    assert refusal(capsys, "serve", flag, value).endswith(f"argument {flag}: {words}")


def test_a_control_port_of_0_is_any_free_port() -> None:
    args = _parser().parse_args(["serve", "--port", "65535", "--control-port", "0"])
    assert (args.port, args.control_port) == (65535, 0)


@pytest.mark.parametrize("url", ["http://127.0.0.1:abc", "http://127.0.0.1:99999/v1", "http://localhost:0"])
def test_serve_refuses_an_upstream_without_a_port_number(capsys: pytest.CaptureFixture[str], url: str) -> None:
    line = refusal(capsys, "serve", "--upstream", f"foo={url}")
    assert line.endswith(f"argument --upstream: the port of {url!r} must be a number from 1 to 65535")


def test_an_upstream_with_or_without_a_port_is_taken() -> None:
    args = _parser().parse_args(["serve", "--upstream", "a=http://127.0.0.1:9/v1", "--upstream", "b=http://[::1]/v1"])
    assert args.upstream == [("a", "http://127.0.0.1:9/v1"), ("b", "http://[::1]/v1")]


@pytest.mark.parametrize("value", ["abc", "0", "99999", "-1", "80 80"])
def test_a_bad_modeldeck_port_is_an_error(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("MODELDECK_PORT", value)
    with pytest.raises(ValueError, match=r"\$MODELDECK_PORT must be a port number from 1 to 65535, got "):
        port_from_env()


def test_an_unset_or_empty_modeldeck_port_is_no_port(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MODELDECK_PORT", raising=False)
    assert port_from_env() is None
    monkeypatch.setenv("MODELDECK_PORT", "")
    assert port_from_env() is None
    monkeypatch.setenv("MODELDECK_PORT", "8080")
    assert port_from_env() == 8080


def test_serve_says_a_bad_modeldeck_port_is_bad() -> None:
    # --model nope: the old code, which ignored the variable, refused the unknown model at once instead of serving.
    result = modeldeck("serve", "--model", "nope", env={"MODELDECK_PORT": "abc", "MODELDECK_API_KEY": "k"})
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "modeldeck: $MODELDECK_PORT must be a port number from 1 to 65535, got 'abc'"
    )


def test_a_command_starting_the_service_says_a_bad_modeldeck_port_is_bad(
    monkeypatch: pytest.MonkeyPatch, paths: AppPaths
) -> None:
    monkeypatch.setenv("MODELDECK_PORT", "abc")

    def no_start(*_args: object) -> None:
        raise AssertionError("a service was started on the settings' port")

    monkeypatch.setattr("app.cli.service_link.start_service", no_start)
    with pytest.raises(ServiceUnavailable, match=r"Cannot start the ModelDeck service: \$MODELDECK_PORT must be"):
        service_on_demand(paths)
