"""The routes of the OpenAI endpoint, as method and path pattern: what app.service.gateway.gateway answers, for
clients and tests that walk the API (the fuzz test), so that a route added there is walked too."""

from __future__ import annotations

from app.service.http.routes import Route

PROXIED_PATHS = frozenset({"/v1/chat/completions", "/v1/completions", "/v1/embeddings"})
ROUTES: tuple[Route, ...] = (("GET", "/v1/models"), *(("POST", path) for path in sorted(PROXIED_PATHS)))
