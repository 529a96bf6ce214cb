"""A model's engine state in the words every page uses: "Running" is loaded and answering, "Not loaded" is on disk
only. Home, Run, Models and the wizard say the same thing for the same state."""

from __future__ import annotations

STATE_WORDS = {
    "stopped": "Not loaded",
    "starting": "Loading",
    "ready": "Running",
    "stopping": "Ejecting",
    "restarting": "Restarting",
    "failed": "Failed",
}


def state_word(state: str | None) -> str:
    """The word for an engine state; an unknown state as the service spelled it, an absent one as a dash."""
    if not state:
        return "\N{EM DASH}"
    return STATE_WORDS.get(state, state)


__all__ = ["STATE_WORDS", "state_word"]
