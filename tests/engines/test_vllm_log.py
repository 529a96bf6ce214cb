"""vLLM's start-up facts from its log: a start-up log written from vLLM 0.34.0's own logger format strings
(tests/fixtures/logs/README.md names each source line), since no vLLM can run on this CPU-only machine."""

from __future__ import annotations

from pathlib import Path

import pytest

from engines.vllm_log import GIB, VLLMStartup, parse_line, parse_startup

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "logs" / "vllm_startup.log"


def test_startup_log_facts() -> None:
    startup = parse_startup(FIXTURE.read_text(encoding="utf-8").splitlines())
    assert startup.kv_cache_tokens == 1_982_448
    assert startup.concurrency_length == 8192
    assert startup.max_concurrency == pytest.approx(242.0)
    assert startup.model_load_bytes == int(14.25 * GIB)
    assert startup.model_load_s == pytest.approx(9.127346)
    assert startup.kv_cache_bytes == int(105.87 * GIB)
    assert startup.init_engine_s == pytest.approx(25.63)
    assert startup.summary()[:2] == ["KV cache: 1,982,448 tokens", "up to 242.00 requests of 8,192 tokens at once"]


def test_tensor_parallel_workers_keep_the_largest_share() -> None:
    lines = [
        "(Worker_TP0 pid=11) INFO 12-04 00:31:15 [gpu/model_runner.py:442] Model loading took 7.10 GiB memory and "
        "5.500000 seconds",
        "(Worker_TP1 pid=12) INFO 12-04 00:31:15 [gpu/model_runner.py:442] Model loading took 7.12 GiB memory and "
        "5.250000 seconds",
    ]
    startup = parse_startup(lines)
    assert startup.model_load_bytes == int(7.12 * GIB)
    assert startup.model_load_s == pytest.approx(5.5)


def test_unknown_and_garbled_lines_change_nothing() -> None:
    before = VLLMStartup()
    for line in ("", "took", "KV cache size: lots of tokens", "INFO Model loading took ? GiB memory", "\x00\xff"):
        assert parse_line(before, line) is before
    assert parse_startup([]).summary() == []
