"""`modeldeck` on the command line: `entry` parses and dispatches, one module per command group."""

from app.cli.entry import main

__all__ = ["main"]
