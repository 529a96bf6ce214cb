"""The command that runs this ModelDeck again in a child process: `python -m app` from a source install, the
packaged executable itself in a frozen build (which takes no `-m`)."""

from __future__ import annotations

import sys


def modeldeck_command() -> list[str]:
    """The argv prefix of `modeldeck` for this installation; subcommands and options follow it."""
    return [sys.executable] if getattr(sys, "frozen", False) else [sys.executable, "-m", "app"]
