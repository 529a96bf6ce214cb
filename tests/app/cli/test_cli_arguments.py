"""Numbers that cannot work (ports, TTLs, counts, sizes) are refused where they are read: on the command line in
one line naming the flag or the variable, and in the benchmark options the service builds from JSON."""

from __future__ import annotations

import json

import pytest

from app.bench.sweep import SweepOptions
from app.cli.entry import _parser
from app.cli.service_link import service_on_demand
from app.client import ServiceUnavailable, port_from_env
from app.paths import AppPaths
from app.service.jobs.bench_runs import BadBenchRequest, BenchRequest
from tests.app.cli.test_cli import modeldeck


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


@pytest.mark.parametrize(
    ("value", "words"), [("-3", "must be at least 0, got -3"), ("ten", "not a whole number: 'ten'")]
)
def test_logs_refuses_a_tail_that_is_no_count_of_lines(
    capsys: pytest.CaptureFixture[str], value: str, words: str
) -> None:
    assert refusal(capsys, "logs", "some-model", "--tail", value).endswith(f"argument --tail: {words}")
    assert _parser().parse_args(["logs", "some-model", "--tail", "0"]).tail == 0  # the new lines only, with -f


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


@pytest.mark.parametrize(
    ("argv", "flag", "words"),
    [(["export", "m", "--format", "k8s", "--max-model-len", "-100"], "--max-model-len", "must be at least 1, got -100"),
     (["export", "m", "--format", "k8s", "--users", "-4"], "--users", "must be at least 1, got -4"),
     (["recommend", "m", "--users", "-3"], "--users", "must be at least 1, got -3"),
     (["recommend", "m", "--users", "0"], "--users", "must be at least 1, got 0"),
     (["recommend", "m", "--max-loss", "-5"], "--max-loss", "expected a percentage from 0 to 1000, got '-5'"),
     (["recommend", "m", "--max-loss", "1001"], "--max-loss", "expected a percentage from 0 to 1000, got '1001'"),
     (["recommend", "m", "--max-loss", "nan"], "--max-loss", "expected a percentage from 0 to 1000, got 'nan'"),
     (["bench", "m", "--requests", "-3"], "--requests", "must be at least 1, got -3"),
     (["bench", "m", "--requests", "0"], "--requests", "must be at least 1, got 0"),
     (["bench", "m", "--output-tokens", "0"], "--output-tokens", "must be at least 1, got 0"),
     (["bench", "m", "--prompt-tokens", "-1"], "--prompt-tokens", "must be at least 1, got -1"),
     (["bench", "m", "--conversations", "0"], "--conversations", "must be from 1 to 4096, got 0"),
     (["bench", "m", "--conversations", "4097"], "--conversations", "must be from 1 to 4096, got 4097"),
     (["bench", "m", "--conversations", "2\N{SUPERSCRIPT TWO}"], "--conversations", "not a whole number: '2²'"),
     (["bench", "m", "--turns", "1"], "--turns", "must be from 2 to 64, got 1"),  # refused in any prompt mode
     (["bench", "m", "--turns", "65"], "--turns", "must be from 2 to 64, got 65"),
     (["bench", "m", "--prefix-tokens", "-5"], "--prefix-tokens", "must be at least 0, got -5"),
     (["bench", "m", "--seed", "-1"], "--seed", "must be at least 0, got -1"),  # as the bench API refuses it
     (["serve", "--max-memory", "0.5"], "--max-memory", "a size must be at least one byte, got '0.5'")],
)  # fmt: skip
def test_counts_that_cannot_work_are_refused(
    capsys: pytest.CaptureFixture[str], argv: list[str], flag: str, words: str
) -> None:
    assert f"argument {flag}: {words}" in refusal(capsys, *argv)


@pytest.mark.parametrize("levels", ["\N{SUPERSCRIPT TWO}", "1,2\N{SUPERSCRIPT TWO}"])  # digits int() cannot read
def test_bench_refuses_concurrency_levels_that_are_no_whole_numbers(levels: str) -> None:
    result = modeldeck("bench", "m", "--concurrency", levels)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"modeldeck: concurrency levels must be whole numbers from 1 to 4096, got {levels!r}"
    ]
    with pytest.raises(BadBenchRequest, match="concurrency levels must be whole numbers") as refused:
        BenchRequest.from_json(json.dumps({"model": "m", "concurrency": levels}).encode(), ["m"])
    assert (refused.value.status, refused.value.param) == (400, "concurrency")


def test_a_loss_threshold_of_0_and_a_fraction_of_a_gib_are_taken() -> None:
    assert _parser().parse_args(["recommend", "m", "--max-loss", "0"]).max_loss == 0.0
    args = _parser().parse_args(["export", "m", "--format", "k8s", "--gpu-memory", "0.5", "--users", "1"])
    assert (args.gpu_memory, args.users) == (2**29, 1)


@pytest.mark.parametrize(
    ("changes", "words"),
    [({"requests_per_level": 0}, "requests per level must be at least 1, got 0"),
     ({"requests_per_level": -3}, "requests per level must be at least 1, got -3"),
     ({"output_tokens": 0}, "output tokens must be at least 1, got 0"),
     ({"prompt_tokens": 0}, "prompt tokens must be at least 1, got 0")],
)  # fmt: skip
def test_sweep_options_refuse_counts_below_one(changes: dict[str, int], words: str) -> None:
    with pytest.raises(ValueError, match=words):
        SweepOptions(**changes)  # type: ignore[arg-type]


@pytest.mark.parametrize("field", ["requests", "output_tokens", "prompt_tokens"])
def test_the_bench_api_answers_400_for_counts_below_one(field: str) -> None:
    for value in (0, -3):
        with pytest.raises(BadBenchRequest) as refused:
            BenchRequest.from_json(f'{{"model": "m", "{field}": {value}}}'.encode(), ["m"])
        assert (refused.value.status, refused.value.param) == (400, field)


@pytest.mark.parametrize(
    ("argv", "flag", "words"),
    [(["serve", "--max-queue", "-1"], "--max-queue", "must be at least 0, got -1"),
     (["start", "m", "--context", "-1"], "--context", "must be at least 1, got -1"),
     (["start", "m", "--context", "0"], "--context", "must be at least 1, got 0"),
     (["start", "m", "--gpu-layers", "-1"], "--gpu-layers", "must be at least 0, got -1"),
     (["start", "m", "--threads", "0"], "--threads", "must be at least 1, got 0"),
     (["start", "m", "--parallel", "-2"], "--parallel", "must be at least 1, got -2"),
     (["search", "q", "--limit", "0"], "--limit", "must be at least 1, got 0"),
     (["search", "q", "--limit", "-5"], "--limit", "must be at least 1, got -5"),
     (["quality", "m", "--threads", "-3"], "--threads", "must be at least 1, got -3"),
     (["quantize", "m", "--to", "Q4_0", "--threads", "0"], "--threads", "must be at least 1, got 0"),
     (["engines", "build", "llama-server", "--jobs", "-1"], "--jobs", "must be at least 1, got -1"),
     (["run", "m", "hi", "--max-tokens", "0"], "--max-tokens", "must be at least 1, got 0")],
)  # fmt: skip
def test_counts_of_queues_threads_tokens_and_results_that_cannot_work_are_refused(
    capsys: pytest.CaptureFixture[str], argv: list[str], flag: str, words: str
) -> None:
    assert refusal(capsys, *argv).endswith(f"argument {flag}: {words}")


def test_an_empty_queue_and_no_gpu_layers_are_taken() -> None:
    assert _parser().parse_args(["serve", "--max-queue", "0"]).max_queue == 0
    assert _parser().parse_args(["start", "m", "--gpu-layers", "0"]).gpu_layers == 0


@pytest.mark.parametrize(
    ("argv", "flag", "words"),
    [(["export", "m", "--format", "k8s", "--gpus-per-node", "0"], "--gpus-per-node", "must be from 1 to 16, got 0"),
     (["export", "m", "--format", "k8s", "--gpus-per-node", "17"], "--gpus-per-node", "must be from 1 to 16, got 17"),
     # with a recorded profile, which gives the GPUs per node, too: it was taken without a word
     (["export", "m", "--format", "k8s", "--hardware", "h.json", "--gpus-per-node", "-3"], "--gpus-per-node",
      "must be from 1 to 16, got -3"),
     (["export", "m", "--format", "k8s", "--nodes", "0"], "--nodes", "must be from 1 to 64, got 0"),
     (["export", "m", "--format", "k8s", "--nodes", "65"], "--nodes", "must be from 1 to 64, got 65"),
     (["export", "m", "--format", "k8s", "--nodes", "2\N{SUPERSCRIPT TWO}"], "--nodes", "not a whole number: '2²'"),
     (["quality", "m", "--tokens", "127"], "--tokens", "must be from 128 to 1048576, got 127"),
     (["quality", "m", "--tokens", "1048577"], "--tokens", "must be from 128 to 1048576, got 1048577"),
     (["quality", "m", "--tokens", "4e3"], "--tokens", "not a whole number: '4e3'")],
)  # fmt: skip
def test_cluster_sizes_and_quality_tokens_out_of_range_are_refused_naming_the_flag(
    capsys: pytest.CaptureFixture[str], argv: list[str], flag: str, words: str
) -> None:
    assert refusal(capsys, *argv).endswith(f"argument {flag}: {words}")


def test_cluster_sizes_and_quality_tokens_at_their_bounds_are_taken() -> None:
    for nodes, gpus in ((1, 1), (64, 16)):
        args = _parser().parse_args(
            ["export", "m", "--format", "k8s", "--nodes", str(nodes), "--gpus-per-node", str(gpus)]
        )
        assert (args.nodes, args.gpus_per_node) == (nodes, gpus)
    for tokens in (128, 1_048_576):
        assert _parser().parse_args(["quality", "m", "--tokens", str(tokens)]).tokens == tokens
