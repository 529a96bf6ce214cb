"""A plan's memory as one bar against what is free: weights, KV cache, and compute plus runtime as coloured
segments, the rest of the budget grey, and a red mark where the plan runs past it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import QRectF, QSize
from PySide6.QtGui import QColor, QPainter, QPaintEvent, QPen
from PySide6.QtWidgets import QLabel, QSizePolicy, QVBoxLayout, QWidget

from app.byte_size import format_bytes

# (label, memory part, colour). Every other part (compute buffers, workspace, the runtime) is overhead to a user
# and is summed into the last segment, so a part the memory model adds later is never left off the bar.
SEGMENTS = (
    ("Weights", "weights", "#2e86de"),
    ("KV cache", "kv_cache", "#f39c12"),
)
OVERHEAD = ("Compute and runtime", "#8e44ad")
FREE_COLOUR = "#dfe6e9"
OVER_COLOUR = "#c0392b"
BAR_HEIGHT = 22


@dataclass(frozen=True)
class Segment:
    label: str
    size: int
    colour: str


@dataclass(frozen=True)
class Bar:
    """One memory pool: what the plan puts in it, part by part, against the bytes it may use (None: unknown)."""

    title: str
    segments: tuple[Segment, ...]
    budget: int | None

    @property
    def used(self) -> int:
        return sum(segment.size for segment in self.segments)

    @property
    def fits(self) -> bool | None:
        return None if self.budget is None else self.used <= self.budget

    def summary(self) -> str:
        parts = ", ".join(f"{segment.label} {format_bytes(segment.size)}" for segment in self.segments)
        if self.budget is None:
            return f"{parts}: {format_bytes(self.used)} in all"
        verdict = "fits" if self.fits else "does not fit"
        return f"{parts}: {format_bytes(self.used)} of {format_bytes(self.budget)} free, {verdict}"


def _segments(parts: list[dict[str, Any]], key: str) -> tuple[Segment, ...]:
    sizes = {part["name"]: int(part[key]) for part in parts}
    named = tuple(Segment(label, sizes.pop(name, 0), colour) for label, name, colour in SEGMENTS)
    return (*named, Segment(OVERHEAD[0], sum(sizes.values()), OVERHEAD[1]))


def memory_bars(memory: dict[str, Any], budgets: dict[str, int], unified: bool) -> list[Bar]:
    """The bars of an option's memory: system RAM, and GPU memory when the plan uses any (per GPU). With unified
    memory both come from one pool, as the planner counts them."""
    parts = memory["parts"]
    ram = _segments(parts, "ram")
    if unified:
        vram = _segments(parts, "vram")
        pooled = tuple(Segment(r.label, r.size + v.size, r.colour) for r, v in zip(ram, vram, strict=True))
        return [Bar("Unified memory", pooled, budgets.get("ram"))]
    bars = [Bar("System memory (RAM)", ram, budgets.get("ram"))]
    if memory.get("vram_per_gpu"):
        title = "GPU memory" + (" (per GPU)" if int(memory.get("gpus") or 1) > 1 else "")
        bars.append(Bar(title, _segments(parts, "vram"), budgets.get("gpu0")))
    return bars


class _BarStrip(QWidget):
    """The painted bar itself."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.bar: Bar | None = None
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)

    def sizeHint(self) -> QSize:
        return QSize(400, BAR_HEIGHT)

    def paintEvent(self, _event: QPaintEvent) -> None:
        bar = self.bar
        if bar is None:
            return
        painter = QPainter(self)
        area = QRectF(self.rect()).adjusted(0.5, 0.5, -0.5, -0.5)
        scale = max(bar.budget or 0, bar.used) or 1
        painter.fillRect(area, QColor(FREE_COLOUR))
        x = area.left()
        for segment in bar.segments:
            width = area.width() * segment.size / scale
            painter.fillRect(QRectF(x, area.top(), width, area.height()), QColor(segment.colour))
            x += width
        if bar.budget is not None and bar.used > bar.budget:
            limit = area.left() + area.width() * bar.budget / scale
            painter.setPen(QPen(QColor(OVER_COLOUR), 3))
            painter.drawLine(int(limit), int(area.top()), int(limit), int(area.bottom()))
        painter.setPen(QPen(self.palette().mid().color(), 1))
        painter.drawRect(area)
        painter.end()


class MemoryBarPanel(QWidget):
    """A title, the bar, and a legend that says each part's size and the budget in words."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.title_label = QLabel()
        self.strip = _BarStrip()
        self.legend_label = QLabel()
        self.legend_label.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addWidget(self.title_label)
        layout.addWidget(self.strip)
        layout.addWidget(self.legend_label)

    @property
    def bar(self) -> Bar | None:
        return self.strip.bar

    def show_bar(self, bar: Bar) -> None:
        self.strip.bar = bar
        self.title_label.setText(f"<b>{bar.title}</b>")
        swatches = " &nbsp; ".join(
            f"<span style='color:{s.colour}'>\N{BLACK SQUARE}</span> {s.label} {format_bytes(s.size)}"
            for s in bar.segments
        )
        free = format_bytes(bar.budget) if bar.budget is not None else "unknown"
        warning = "" if bar.fits is not False else f" \N{EM DASH} <b style='color:{OVER_COLOUR}'>does not fit</b>"
        self.legend_label.setText(
            f"{swatches}<br>{format_bytes(bar.used)} at most (a prompt that fills the context), {free} free{warning}"
        )
        # A screen reader cannot see the colours: the bar says the same in words.
        self.strip.setAccessibleName(bar.title)
        self.strip.setAccessibleDescription(bar.summary())
        self.strip.setToolTip(bar.summary())
        self.strip.update()
