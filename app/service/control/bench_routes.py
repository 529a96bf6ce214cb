"""Control-API routes for benchmarks: start one, follow it, cancel it, read and compare the saved cards.

POST /api/bench {model, concurrency, prompt_tokens, output_tokens, requests, prompt_mode, prefix_tokens,
                 conversations, turns, seed} -> 202 the run
GET /api/bench -> {run, cards}        POST /api/bench/cancel -> the run
GET /api/bench/cards/ID -> the card   GET /api/bench/compare?a=ID&b=ID -> {a, b, rows: [[what, A, B], ...]}
Progress comes as `bench` events on /api/events.
"""

from __future__ import annotations

from collections.abc import Collection

from app.service.control.child_job_routes import ChildJobRoutes
from app.service.http.api import MAX_SMALL_BODY
from app.service.jobs.bench_runs import BenchRequest, BenchRuns


class BenchRoutes(ChildJobRoutes[BenchRequest]):
    """Answers /api/bench*; `handle` returns False for any other route."""

    def __init__(self, runs: BenchRuns, known_models: Collection[str]) -> None:
        super().__init__("bench", runs, BenchRequest.from_json, known_models, MAX_SMALL_BODY)
        self.runs = runs
