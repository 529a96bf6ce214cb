"""The level of an engine's log line, read from its text: llama.cpp prints thousands of loader and slot lines
with no level on them, which the log view hides by default.

Levels, lowest first: debug, info, warning, error. A line with llama.cpp's own level prefix (`... D `, `I `,
`W `, `E ` after its timestamp) or Python's (`DEBUG:`, `INFO:`, `WARNING:`, `ERROR:`) takes that level; an indented
line continues the line before it (a traceback's frames stay with their error); the rest by what they say.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

LEVELS = ("debug", "info", "warning", "error")
RANK = {level: rank for rank, level in enumerate(LEVELS)}

_LLAMA_PREFIX = re.compile(r"^\d+\.\d+\.\d+\.\d+ ([DIWE]) ")
_LLAMA_LEVEL = {"D": "debug", "I": "info", "W": "warning", "E": "error"}
_PYTHON_PREFIX = re.compile(r"^(DEBUG|INFO|WARNING|ERROR|CRITICAL)[: ]")
_ERROR = re.compile(r"\b(error|failed|fatal|traceback|exception|abort(ed)?)\b", re.IGNORECASE)
_WARNING = re.compile(r"\bwarn(ing)?\b", re.IGNORECASE)
# What llama.cpp writes while loading a model and serving each request: model metadata, tensor and buffer sizes,
# the compute graph, and per-slot progress. Useful when something is wrong, noise otherwise.
_DEBUG_PREFIXES = (
    "llama_model_loader:", "print_info:", "load_tensors:", "load:", "llama_context:", "llama_kv_cache",
    "llama_model_load", "llm_load_", "graph_reserve", "ggml_", "gguf_", "llama_init_from", "clip_", "init:",
    "set_abort_callback", "sched_reserve", "common_init", "slot ", "srv  update_slots", "que  ", "model type",
    "Model metadata:", "Available chat formats", "Using gguf chat template", "Guessed chat format",
    "llama_perf_context_print", "system_info:", "AVX", "CPU :", "build_info", "load_backend",
)  # fmt: skip


def line_level(line: str, previous: str = "info") -> str:
    """The level of one line; `previous`: the level of the line before it (for continuation lines)."""
    prefixed = _LLAMA_PREFIX.match(line)
    if prefixed:
        return _LLAMA_LEVEL[prefixed.group(1)]
    python = _PYTHON_PREFIX.match(line)
    if python:
        word = python.group(1).lower()
        return "error" if word == "critical" else word
    if line[:1] in (" ", "\t") and line.strip():
        return previous
    if _ERROR.search(line):
        return "error"
    if _WARNING.search(line):
        return "warning"
    if line.startswith(_DEBUG_PREFIXES):
        return "debug"
    return "info"


def levels(lines: Iterable[str], previous: str = "info") -> Iterator[str]:
    """The level of each line, in order."""
    for line in lines:
        previous = line_level(line, previous)
        yield previous


__all__ = ["LEVELS", "RANK", "levels", "line_level"]
