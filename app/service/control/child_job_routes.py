"""Control-API routes for a kind of one-at-a-time child job with saved cards (benchmarks, quality runs).

POST /api/KIND {...} -> 202 the run      GET /api/KIND -> {run, cards}      POST /api/KIND/cancel -> the run
GET /api/KIND/cards/ID -> the card       GET /api/KIND/compare?a=ID&b=ID -> {a, b, rows: [[what, A, B], ...]}
Progress comes as KIND events on /api/events.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection
from typing import Any, Generic, Protocol, TypeVar

from app.service.http.api import Query, query_text, read_limited
from app.service.http.asgi import Receive, Send, send_error, send_json
from app.service.http.routes import RoutePattern
from app.service.jobs.child_jobs import BadJobRequest, ChildRun, JobCardNotFound, JobConflict

RequestT = TypeVar("RequestT")
RequestC = TypeVar("RequestC", contravariant=True)


def job_routes(kind: str) -> tuple[RoutePattern, ...]:
    """The routes of a kind of job, as ChildJobRoutes answers them."""
    base = f"/api/{kind}"
    return (("GET", base), ("POST", base), ("POST", f"{base}/cancel"), ("GET", f"{base}/cards/{{}}"),
            ("GET", f"{base}/compare"))  # fmt: skip


class SavedCard(Protocol):
    def to_dict(self) -> dict[str, Any]: ...


class JobRuns(Protocol[RequestC]):
    """What the routes need of a kind's runs (app.service.jobs.child_jobs.ChildJobs and its saved cards)."""

    @property
    def current(self) -> ChildRun | None: ...

    async def start(self, request: RequestC) -> ChildRun: ...

    async def cancel(self) -> ChildRun: ...

    def cards(self) -> list[dict[str, Any]]: ...

    def card(self, card_id: str) -> SavedCard: ...

    def compare(self, first: str, second: str) -> list[tuple[str, str, str]]: ...


class ChildJobRoutes(Generic[RequestT]):
    """Answers /api/KIND*; `handle` returns False for any other route. Errors: a BadJobRequest is a 400 (404 for an
    unknown model), a JobConflict a 409, a JobCardNotFound a 404, a body over `max_body` bytes a 413."""

    def __init__(
        self,
        kind: str,
        runs: JobRuns[RequestT],
        parse: Callable[[bytes, Collection[str]], RequestT],
        known_models: Collection[str],
        max_body: int,
    ) -> None:
        self._kind = kind
        self._runs = runs
        self._parse = parse
        self._known_models = known_models  # a live view: models added while the service runs count too
        self._max_body = max_body

    @property
    def routes(self) -> tuple[RoutePattern, ...]:
        """What `handle` answers, for the control API's route table."""
        return job_routes(self._kind)

    async def handle(self, method: str, parts: list[str], query: Query, receive: Receive, send: Send) -> bool:
        if parts[:2] != ["api", self._kind]:
            return False
        try:
            return await self._route(method, parts[2:], query, receive, send)
        except BadJobRequest as exc:
            code = "model_not_found" if exc.status == 404 else None
            await send_error(send, exc.status, str(exc), "invalid_request_error", code, exc.param)
        except JobConflict as exc:
            await send_error(send, 409, str(exc), "invalid_request_error", "conflict")
        except JobCardNotFound as exc:
            await send_error(send, 404, str(exc), "invalid_request_error", "card_not_found")
        return True

    async def _route(self, method: str, rest: list[str], query: Query, receive: Receive, send: Send) -> bool:
        runs = self._runs
        match method, rest:
            case "GET", []:
                current = runs.current
                cards = await asyncio.to_thread(runs.cards)
                await send_json(send, 200, {"run": current.to_dict() if current else None, "cards": cards})
            case "POST", []:
                request = self._parse(await read_limited(receive, self._max_body), self._known_models)
                await send_json(send, 202, (await runs.start(request)).to_dict())
            case "POST", ["cancel"]:
                await send_json(send, 200, (await runs.cancel()).to_dict())
            case "GET", ["cards", card_id]:
                card = await asyncio.to_thread(runs.card, card_id)
                await send_json(send, 200, card.to_dict())
            case "GET", ["compare"]:
                first, second = query_text(query, "a"), query_text(query, "b")
                if not first or not second:
                    raise BadJobRequest("`a` and `b` (two card ids) are required.", "a" if not first else "b")
                rows = await asyncio.to_thread(runs.compare, first, second)
                await send_json(send, 200, {"a": first, "b": second, "rows": [list(row) for row in rows]})
            case _:
                return False
        return True


__all__ = ["ChildJobRoutes", "JobRuns", "job_routes"]
