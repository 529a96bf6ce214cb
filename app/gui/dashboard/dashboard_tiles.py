"""The dashboard's headline numbers above its charts: tokens/s now, TTFT p50, requests running and waiting, RAM,
GPU memory where the machine has a GPU, and the share of drafted tokens accepted where a model decodes
speculatively. Read from the same buffers as the charts, at each refresh."""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QVBoxLayout, QWidget

from app.byte_size import format_bytes
from app.gui.dashboard.dashboard_data import DashboardData, SeriesKey

STALE_S = 5.0  # a series that has not had a point for this long is not "now"


@dataclass(frozen=True)
class TileValues:
    """What the tiles show, in words; None: the tile has nothing to show (a GPU tile on a machine without one)."""

    tokens_per_s: str
    ttft_p50: str
    requests: str
    ram: str
    gpu_memory: str | None
    draft_acceptance: str | None = None


def tile_values(data: DashboardData, model: str | None) -> TileValues:
    """The latest values, summed over models (or of `model` alone), in the units the charts use."""
    since = data.latest_time - STALE_S

    def of(name: str) -> list[float]:
        return [value for key, value in data.latest(name, since) if _matches(key, model)]

    generated = of("generation_tokens_per_s")
    ttfts = of("ttft_p50_s")
    running, waiting = of("requests_running"), of("requests_waiting")
    used, total = of("system_memory_used_bytes"), of("system_memory_total_bytes")
    gpu_used, gpu_total = of("gpu_memory_used_bytes"), of("gpu_memory_total_bytes")
    accepted = of("engine_draft_acceptance")
    dash = "\N{EM DASH}"
    return TileValues(
        tokens_per_s=f"{sum(generated):.1f} tokens/s" if generated else dash,
        # Over several models, the slowest median: the one a user waits on.
        ttft_p50=f"{max(ttfts) * 1000:.0f} ms" if ttfts else dash,
        requests=f"{sum(running):.0f} running, {sum(waiting):.0f} waiting" if running or waiting else dash,
        ram=_used_of(used, total),
        gpu_memory=_used_of(gpu_used, gpu_total) if gpu_used else None,
        # Over several speculating models, the lowest: the one whose draft helps least.
        draft_acceptance=f"{min(accepted) * 100:.0f} %" if accepted else None,
    )


def _matches(key: SeriesKey, model: str | None) -> bool:
    labelled = dict(key[1]).get("model")
    return model is None or labelled is None or labelled == model


def _used_of(used: list[float], total: list[float]) -> str:
    if not used:
        return "\N{EM DASH}"
    text = format_bytes(sum(used))
    return f"{text} of {format_bytes(sum(total))}" if total else text


class DashboardTiles(QWidget):
    """A row of tiles: a small caption above a large number each."""

    CAPTIONS = (
        ("tokens_per_s", "Generating now"),
        ("ttft_p50", "Time to first token (median, last minute)"),
        ("requests", "Requests"),
        ("ram", "RAM used"),
        ("gpu_memory", "GPU memory used"),
        ("draft_acceptance", "Drafted tokens accepted (speculative decoding)"),
    )

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.values: dict[str, QLabel] = {}
        self.tiles: dict[str, QFrame] = {}
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        for field, caption in self.CAPTIONS:
            tile = QFrame()
            tile.setFrameShape(QFrame.Shape.StyledPanel)
            inner = QVBoxLayout(tile)
            caption_label = QLabel(caption)
            caption_label.setWordWrap(True)
            value = QLabel("\N{EM DASH}")
            font = value.font()
            font.setPointSizeF(font.pointSizeF() * 1.5)
            font.setBold(True)
            value.setFont(font)
            value.setAccessibleName(caption)
            inner.addWidget(caption_label)
            inner.addWidget(value)
            layout.addWidget(tile, 1)
            self.values[field] = value
            self.tiles[field] = tile
        self.tiles["gpu_memory"].setVisible(False)
        self.tiles["draft_acceptance"].setVisible(False)

    def show_values(self, values: TileValues) -> None:
        for field, label in self.values.items():
            text = getattr(values, field)
            if field in ("gpu_memory", "draft_acceptance"):
                self.tiles[field].setVisible(text is not None)
            if text is not None and label.text() != text:
                label.setText(text)

    def text_of(self, field: str) -> str:
        return self.values[field].text()


__all__ = ["DashboardTiles", "TileValues", "tile_values"]
