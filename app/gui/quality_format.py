"""Quality figures as the window shows them: a variant's expected loss, measured or published, always labelled."""

from __future__ import annotations

from typing import Any


def loss_text(loss: dict[str, Any] | None) -> str:
    """`measured: PPL +1.23 % vs ...` or `published: +0.4685 PPL on Llama-3-8B ...`; a dash when unknown."""
    if not isinstance(loss, dict):
        return "\N{EM DASH}"
    label = loss.get("label")
    return str(label) if label else "\N{EM DASH}"


def percent(value: float | None, digits: int = 2) -> str:
    return "\N{EM DASH}" if value is None else f"{value:+.{digits}f} %"
