"""Control-API routes for engine builds: the wizard's "Build llama-server" button.

POST /api/engines/llama-server/build -> 202 the build (409 while one runs)
POST /api/engines/llama-server/build/cancel -> the build, its processes gone
GET /api/engines/builds -> {build: the running or last build, or None}
Progress comes as `engine_build` events on /api/events.
"""

from __future__ import annotations

from app.api_types import EngineBuildListing
from app.service.http.api import Query
from app.service.http.asgi import Receive, Send, send_error, send_json
from app.service.http.routes import RoutePattern
from app.service.jobs.engine_builds import BuildConflict, EngineBuilds, UnknownBuildTarget


class EngineRoutes:
    """Answers /api/engines/*; `handle` returns False for any other route."""

    routes: tuple[RoutePattern, ...] = (
        ("GET", "/api/engines/builds"), ("POST", "/api/engines/{}/build"), ("POST", "/api/engines/{}/build/cancel"),
    )  # fmt: skip

    def __init__(self, builds: EngineBuilds) -> None:
        self.builds = builds

    async def handle(self, method: str, parts: list[str], _query: Query, _receive: Receive, send: Send) -> bool:
        if parts[:2] != ["api", "engines"]:
            return False
        builds = self.builds
        try:
            match method, parts[2:]:
                case "GET", ["builds"]:
                    current = builds.current
                    listing: EngineBuildListing = {"build": current.to_dict() if current else None}
                    await send_json(send, 200, listing)
                case "POST", [engine, "build"]:
                    await send_json(send, 202, (await builds.start(engine)).to_dict())
                case "POST", [engine, "build", "cancel"]:
                    current = builds.current
                    if current is not None and current.engine != engine:
                        raise BuildConflict(f"No build of {engine!r} is going (the build is of {current.engine}).")
                    await send_json(send, 200, (await builds.cancel()).to_dict())
                case _:
                    return False
        except UnknownBuildTarget as exc:
            await send_error(send, 404, str(exc), "invalid_request_error", "engine_not_buildable", "engine")
        except BuildConflict as exc:
            await send_error(send, 409, str(exc), "invalid_request_error", "conflict")
        return True
