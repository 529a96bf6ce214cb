"""Where a request for one model goes: everything the gateway needs from the engine manager, asked once."""

from __future__ import annotations

from dataclasses import dataclass

from app.service.launch.admission import EngineQueue
from engines.base import Capabilities, InputLimit


@dataclass(frozen=True)
class Route:
    """One model's way upstream, as it stands when the gateway asks (EngineManager.route)."""

    model: str  # the id the client asked for: answers name it
    upstream_model: str  # the id the server at `url` knows the model by (a remote's `NAME/MODEL` is `MODEL` there)
    url: str | None  # the ready server's base URL; None: its engine must be started (or restarted) first
    bearer: str  # the key sent upstream: the engines' internal key, a remote's own, or none
    queue: EngineQueue  # admission: how many requests the engine serves at once, how many may wait
    engine_name: str
    capabilities: Capabilities
    chat_template: str | None  # the model file's, to explain an engine's refusal; None when not known
    remote: str | None  # the name of the remote serving the model; None for a model served here
    external: bool  # a server ModelDeck did not start (a remote or --upstream): its answers get limits
    slot_count: int  # engine slots a request may be routed to by prompt prefix (under 2: no slot routing)
    embedding_limit: InputLimit | None = None  # of one input where `url` embeds: known once the gateway asks there

    @property
    def renamed(self) -> bool:
        """The upstream names the model otherwise than the client did: the gateway renames it both ways."""
        return self.upstream_model != self.model
