"""The Benchmark page's words and cells from run records, and its ordering of run states that cross threads."""

from __future__ import annotations

from typing import Any

import pytest
from pytestqt.qtbot import QtBot

from app.bench.levels import parse_concurrency
from app.gui.bench.bench_format import LEVEL_COLUMNS, card_cells, level_cells, parse_levels, run_status
from app.gui.bench.benchmark_page import BenchmarkPage
from app.gui.connection.service_connection import ServiceConnection
from app.paths import AppPaths

LEVEL = {
    "concurrency": 4, "requests": 8, "completed": 7, "errors": 1, "duration_s": 2.0, "output_tokens": 100,
    "prompt_tokens_mean": 30.0, "output_tokens_per_s": 50.04, "request_rate": 3.5, "ttft_p50_s": 0.0123,
    "ttft_p99_s": 0.5, "itl_p50_s": None, "itl_p99_s": 0.02, "gain": 1.75, "first_error": "HTTP 429: busy",
}  # fmt: skip


def run(**changes: Any) -> dict[str, Any]:
    base = {
        "id": "bench-1", "state": "running", "phase": "level", "model": "m", "concurrency": [1, 4],
        "requests_per_level": [8, 8], "level_index": 1, "level_done": 3, "fraction": 11 / 16, "levels": [],
        "card_id": None, "error": None,
    }  # fmt: skip
    return {**base, **changes}


def test_levels_parse_or_say_what_is_expected() -> None:
    assert parse_levels("1, 4,16") == [1, 4, 16]
    assert parse_levels("2 8") == [2, 8]
    for bad in ("", "0", "1,x", "-1", "4097", "1.5", "2\N{SUPERSCRIPT TWO}"):  # a digit int() does not read
        with pytest.raises(ValueError, match="whole numbers from 1 to 4096"):
            parse_levels(bad)


@pytest.mark.parametrize(
    "text", ["1,4,16", " 2 , 8 ", "4096", "", ",", "0", "1,x", "4097", "1.5", "2\N{SUPERSCRIPT TWO}", "\u0663"]
)
def test_the_page_takes_the_levels_the_service_takes(text: str) -> None:
    """The page checks levels before it asks (no round trip to hear a refusal), so it must judge them as the
    service's own parser does: what it sends is taken, what it refuses would have been refused."""
    try:
        service: list[int] | None = list(parse_concurrency(text))
    except ValueError:
        service = None
    try:
        page: list[int] | None = parse_levels(text)
    except ValueError:
        page = None
    assert page == service


def test_cells_and_status_words() -> None:
    cells = dict(zip(LEVEL_COLUMNS, level_cells(LEVEL), strict=True))
    # A level of a card written before prompt modes: no prompt or decode rates, no turns.
    assert cells == {"Concurrency": "4", "Output tok/s": "50.0", "Prompt tok/s": "-", "Decode tok/s": "-",
                     "Req/s": "3.50", "TTFT p50 ms": "12.3", "TTFT p99 ms": "500.0", "ITL p50 ms": "-",
                     "ITL p99 ms": "20.0", "Errors": "1/8", "Gain": "1.75x", "TTFT by turn ms": "-",
                     "Warm/cold": "-"}  # fmt: skip
    turns = {**LEVEL, "prompt_tokens_per_s": 812.34, "decode_tokens_per_s": 41.25,
             "ttft_by_turn_s": [2.5, 0.125, None], "warm_cold_ratio": 0.05}  # fmt: skip
    cells = dict(zip(LEVEL_COLUMNS, level_cells(turns), strict=True))
    assert cells["Prompt tok/s"] == "812.3" and cells["Decode tok/s"] == "41.2"
    assert cells["TTFT by turn ms"] == "2500.0 / 125.0 / -" and cells["Warm/cold"] == "0.05x"
    card = {"id": "c", "created": "2026-12-04T01:02:03Z", "model": "m", "concurrency": [1, 4],
            "best_output_tokens_per_s": None, "errors": 0}  # fmt: skip
    assert card_cells(card) == ["2026-12-04 01:02:03", "m", "identical", "1,4", "-", "0"]
    assert card_cells({**card, "prompt_mode": "multi-turn"})[2] == "multi-turn"
    assert run_status(run()) == "Concurrency 4 (level 2 of 2): 3 of 8 requests done"
    assert run_status(run(phase="model", level_index=None)) == "Starting the model\N{HORIZONTAL ELLIPSIS}"
    assert run_status(run(state="completed", card_id="c1")) == "Done: m, saved as card c1."
    assert "failed: Unknown model" in run_status(run(state="failed", error="Unknown model"))
    assert run_status(run(state="cancelled")).startswith("Cancelled")


def test_an_older_state_of_the_run_shown_is_dropped(qtbot: QtBot, paths: AppPaths) -> None:
    """States come from the event thread and from call answers: the page keeps the furthest one."""
    page = BenchmarkPage(ServiceConnection(paths, 0))  # never opened: only records are shown
    qtbot.addWidget(page)
    page.show_run(run(levels=[LEVEL]))
    page.show_run(run(phase="starting", level_index=None, fraction=0.0))  # the start call's answer, late
    assert page.run is not None and page.run["phase"] == "level" and page.results_table.rowCount() == 1
    page.show_run(run(state="cancelled", phase="cancelled"))
    page.show_run(run(level_done=5, fraction=13 / 16))  # a progress event sent before the cancel
    assert page.run["state"] == "cancelled" and "Cancelled" in page.status_label.text()
    page.show_run(run(id="bench-2", phase="starting", level_index=None, fraction=0.0))  # a new run
    assert page.run["id"] == "bench-2" and page.is_running
