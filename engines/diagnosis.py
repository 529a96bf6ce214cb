"""Why an engine died, in words a user can act on, from its exit status and the last lines it printed.

One table, tried in order; the first rule whose exit status or log text matches wins. Unknown stays unknown.
"""

from __future__ import annotations

import signal
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Diagnosis:
    """What went wrong and what to try; `kind` lets a client offer a matching action (relaunch smaller, ...)."""

    kind: str  # out_of_memory, cpu_instructions, unsupported_architecture, corrupt_file, port_taken
    summary: str
    advice: str

    def text(self) -> str:
        return f"{self.summary} {self.advice}"


@dataclass(frozen=True)
class _Rule:
    diagnosis: Diagnosis
    needles: tuple[str, ...]  # lower-case fragments of a log line
    exit_codes: tuple[int, ...] = ()  # negative: killed by that signal


_OUT_OF_MEMORY_NEEDLES = (
    "failed to allocate",
    "insufficient memory",
    "out of memory",
    "bad_alloc",
    "cannot allocate memory",
    "cudamalloc failed",
    "unable to allocate",
    "memoryerror",
)

_RULES = (
    _Rule(
        Diagnosis(
            "out_of_memory",
            "The engine ran out of memory.",
            "Try a smaller context, fewer GPU layers or a smaller quantization, or stop other models first.",
        ),
        (
            "failed to allocate",
            "insufficient memory",
            "out of memory",
            "bad_alloc",
            "cannot allocate memory",
            "cudamalloc failed",
            "unable to allocate",
            "memoryerror",
        ),
    ),
    _Rule(
        Diagnosis(
            "cpu_instructions",
            "The engine uses processor instructions this CPU does not have (illegal instruction).",
            "Build the engine again on this machine: ModelDeck's builds leave out AMX, which some virtual machines "
            "report but cannot run (installers/setup-env.sh for llama-cpp-python, `modeldeck engines build "
            "llama-server` for llama-server).",
        ),
        ("illegal instruction",),
        (-signal.SIGILL,),
    ),
    _Rule(
        Diagnosis(
            "unsupported_architecture",
            "This engine version does not know the model's architecture.",
            "Update the engine (a newer llama-cpp-python), or pick a model of a supported architecture.",
        ),
        ("unknown model architecture", "unsupported model architecture", "model architecture not supported"),
    ),
    _Rule(
        Diagnosis(
            "corrupt_file",
            "The model file is damaged or incomplete.",
            "Verify it in the library and download it again.",
        ),
        ("invalid magic", "not within the file bounds", "tensor data is not within", "corrupted", "unexpected end"),
    ),
    _Rule(
        Diagnosis(
            "port_taken",
            "Another program took the engine's port.",
            "Launch again: ModelDeck picks a new free port each time.",
        ),
        ("address already in use",),
    ),
)


def diagnose(returncode: int | None, lines: Sequence[str]) -> Diagnosis | None:
    """The first matching diagnosis for an engine that exited with `returncode` after printing `lines`."""
    text = "\n".join(lines).lower()
    for rule in _RULES:
        if (returncode is not None and returncode in rule.exit_codes) or any(n in text for n in rule.needles):
            return rule.diagnosis
    return None
