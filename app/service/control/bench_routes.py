"""Control-API routes for benchmarks: start one, follow it, cancel it, read and compare the saved cards.

POST /api/bench {model, concurrency, prompt_tokens, output_tokens, requests, prompt_mode, prefix_tokens,
                 conversations, turns, seed} -> 202 the run
GET /api/bench -> {run, cards}        POST /api/bench/cancel -> the run
GET /api/bench/cards/ID -> the card   GET /api/bench/compare?a=ID&b=ID -> {a, b, rows: [[what, A, B], ...]}
Progress comes as `bench` events on /api/events.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection

from app.service.http.api import MAX_SMALL_BODY, Query, query_text, read_limited
from app.service.http.asgi import Receive, Send, send_error, send_json
from app.service.jobs.bench_runs import BadBenchRequest, BenchConflict, BenchRequest, BenchRuns, CardNotFound


class BenchRoutes:
    """Answers /api/bench*; `handle` returns False for any other route."""

    def __init__(self, runs: BenchRuns, known_models: Collection[str]) -> None:
        self.runs = runs
        self._known_models = known_models  # a live view: models added while the service runs count too

    async def handle(self, method: str, parts: list[str], query: Query, receive: Receive, send: Send) -> bool:
        if parts[:2] != ["api", "bench"]:
            return False
        try:
            return await self._route(method, parts[2:], query, receive, send)
        except BadBenchRequest as exc:
            code = "model_not_found" if exc.status == 404 else None
            await send_error(send, exc.status, str(exc), "invalid_request_error", code, exc.param)
        except BenchConflict as exc:
            await send_error(send, 409, str(exc), "invalid_request_error", "conflict")
        except CardNotFound as exc:
            await send_error(send, 404, str(exc), "invalid_request_error", "card_not_found")
        return True

    async def _route(self, method: str, rest: list[str], query: Query, receive: Receive, send: Send) -> bool:
        runs = self.runs
        match method, rest:
            case "GET", []:
                current = runs.current
                cards = await asyncio.to_thread(runs.cards)
                await send_json(send, 200, {"run": current.to_dict() if current else None, "cards": cards})
            case "POST", []:
                request = BenchRequest.from_json(await read_limited(receive, MAX_SMALL_BODY), self._known_models)
                await send_json(send, 202, (await runs.start(request)).to_dict())
            case "POST", ["cancel"]:
                await send_json(send, 200, (await runs.cancel()).to_dict())
            case "GET", ["cards", card_id]:
                card = await asyncio.to_thread(runs.card, card_id)
                await send_json(send, 200, card.to_dict())
            case "GET", ["compare"]:
                first, second = query_text(query, "a"), query_text(query, "b")
                if not first or not second:
                    raise BadBenchRequest("`a` and `b` (two card ids) are required.", "a" if not first else "b")
                rows = await asyncio.to_thread(runs.compare, first, second)
                await send_json(send, 200, {"a": first, "b": second, "rows": [list(row) for row in rows]})
            case _:
                return False
        return True
