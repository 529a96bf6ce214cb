"""Control-API routes for quality runs: start one, follow it, cancel it, read and compare the saved cards.

POST /api/quality {model, variants, reference, data, tokens} -> 202 the run
GET /api/quality -> {run, cards}          POST /api/quality/cancel -> the run
GET /api/quality/cards/ID -> the card     GET /api/quality/compare?a=ID&b=ID -> {a, b, rows: [[what, A, B], ...]}
Progress comes as `quality` events on /api/events.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection

from app.service.http.asgi import BodyTooLarge, ClientGone, Receive, Send, read_body, send_error, send_json
from app.service.jobs.quality_runs import (
    BadQualityRequest,
    QualityCardNotFound,
    QualityConflict,
    QualityRequest,
    QualityRuns,
)

MAX_BODY = 16384
Query = dict[str, list[str]]


class QualityRoutes:
    """Answers /api/quality*; `handle` returns False for any other route."""

    def __init__(self, runs: QualityRuns, known_models: Collection[str]) -> None:
        self.runs = runs
        self._known_models = known_models  # a live view: models added while the service runs count too

    async def handle(self, method: str, parts: list[str], query: Query, receive: Receive, send: Send) -> bool:
        if parts[:2] != ["api", "quality"]:
            return False
        try:
            return await self._route(method, parts[2:], query, receive, send)
        except BadQualityRequest as exc:
            code = "model_not_found" if exc.status == 404 else None
            await send_error(send, exc.status, str(exc), "invalid_request_error", code, exc.param)
        except QualityConflict as exc:
            await send_error(send, 409, str(exc), "invalid_request_error", "conflict")
        except QualityCardNotFound as exc:
            await send_error(send, 404, str(exc), "invalid_request_error", "card_not_found")
        except BodyTooLarge:
            await send_error(send, 413, f"The body is over {MAX_BODY} bytes.", "invalid_request_error")
        except ClientGone:
            pass  # nobody is left to answer
        return True

    async def _route(self, method: str, rest: list[str], query: Query, receive: Receive, send: Send) -> bool:
        runs = self.runs
        match method, rest:
            case "GET", []:
                current = runs.current
                cards = await asyncio.to_thread(runs.cards)
                await send_json(send, 200, {"run": current.to_dict() if current else None, "cards": cards})
            case "POST", []:
                request = QualityRequest.from_json(await read_body(receive, MAX_BODY), self._known_models)
                await send_json(send, 202, (await runs.start(request)).to_dict())
            case "POST", ["cancel"]:
                await send_json(send, 200, (await runs.cancel()).to_dict())
            case "GET", ["cards", card_id]:
                card = await asyncio.to_thread(runs.card, card_id)
                await send_json(send, 200, card.to_dict())
            case "GET", ["compare"]:
                first, second = query.get("a", [""])[0], query.get("b", [""])[0]
                if not first or not second:
                    raise BadQualityRequest("`a` and `b` (two card ids) are required.", "a" if not first else "b")
                rows = await asyncio.to_thread(runs.compare, first, second)
                await send_json(send, 200, {"a": first, "b": second, "rows": [list(row) for row in rows]})
            case _:
                return False
        return True
