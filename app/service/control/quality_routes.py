"""Control-API routes for quality runs: start one, follow it, cancel it, read and compare the saved cards.

POST /api/quality {model, variants, reference, data, tokens} -> 202 the run
GET /api/quality -> {run, cards}          POST /api/quality/cancel -> the run
GET /api/quality/cards/ID -> the card     GET /api/quality/compare?a=ID&b=ID -> {a, b, rows: [[what, A, B], ...]}
Progress comes as `quality` events on /api/events.
"""

from __future__ import annotations

from collections.abc import Collection

from app.service.control.child_job_routes import ChildJobRoutes
from app.service.jobs.quality_runs import QualityRequest, QualityRuns

MAX_BODY = 16384


class QualityRoutes(ChildJobRoutes[QualityRequest]):
    """Answers /api/quality*; `handle` returns False for any other route."""

    def __init__(self, runs: QualityRuns, known_models: Collection[str]) -> None:
        super().__init__("quality", runs, QualityRequest.from_json, known_models, MAX_BODY)
        self.runs = runs
