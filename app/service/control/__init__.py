"""The control API (/api) used by the GUI and the CLI: its routes and the blocking work they run on threads."""
