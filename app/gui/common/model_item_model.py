"""The Qt item model of the language models the service knows, with their engines' live state."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QObject, QPersistentModelIndex, Qt
from PySide6.QtGui import QColor

from app.api_types import EngineEvent, MemoryCheckRecord, ModelRecord, ModelState, StartupRecord
from app.byte_size import format_bytes
from app.gui.common.state_words import state_word

Index = QModelIndex | QPersistentModelIndex

COLUMNS = ("Model", "State", "Size", "Memory")
MODEL_COLUMN, STATE_COLUMN, SIZE_COLUMN, MEMORY_COLUMN = range(len(COLUMNS))
MODEL_ID_ROLE = Qt.ItemDataRole.UserRole + 1

# Fields an engine event carries; polled rows never overwrite them, because a poll answered before an event
# was published would otherwise roll the state back until the next poll.
_EVENT_FIELDS = ("state", "message")
_FAILED_COLOUR = QColor("#c0392b")
UNKNOWN_STATE = "Unknown: not connected to the ModelDeck service"


def memory_check_text(memory: MemoryCheckRecord | None) -> str | None:
    """The service's check of the memory prediction for one launch, in words."""
    if not memory:
        return None
    lines = [
        f"Predicted at load {format_bytes(memory['predicted_at_load_bytes'])}, measured "
        f"{format_bytes(memory['measured_at_load_bytes'])} (error {memory['error_at_load']:+.1%}).",
        f"Predicted peak, with a prompt filling the context: {format_bytes(memory['predicted_peak_bytes'])}.",
    ]
    if memory.get("measured_after_request_bytes") is not None:
        verdict = "within" if memory["within_peak"] else "ABOVE"
        lines.append(
            f"After the first request: {format_bytes(memory['measured_after_request_bytes'])}, {verdict} the peak."
        )
    return "\n".join(lines)


def startup_text(startup: StartupRecord | None) -> str | None:
    """What the engine said about itself while starting (vLLM: KV cache tokens, concurrency, load time)."""
    lines = [str(line) for line in startup["summary"]] if startup else []
    return "Engine start-up: " + "; ".join(lines) + "." if lines else None


class ModelItemModel(QAbstractTableModel):
    """One row per model: id, engine state (its message as tooltip), file size and resident memory."""

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._rows: list[ModelRecord] = []
        # False from the loss of the service until its next snapshot: the rows' states and memory are stale.
        self._states_known = True

    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008 (Qt's default argument)
        return 0 if parent.isValid() else len(self._rows)

    def columnCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if orientation == Qt.Orientation.Horizontal and role == Qt.ItemDataRole.DisplayRole:
            return COLUMNS[section]
        return None

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or index.row() >= len(self._rows):
            return None
        record = self._rows[index.row()]
        column = index.column()
        if not self._states_known and column in (STATE_COLUMN, MEMORY_COLUMN):
            return self._unknown(role)
        if role == Qt.ItemDataRole.DisplayRole:
            return self._display(record, column)
        if role == Qt.ItemDataRole.ToolTipRole:
            if column == STATE_COLUMN:
                return record.get("message") or record["state"]
            if column == MEMORY_COLUMN:
                texts = (memory_check_text(record.get("memory")), startup_text(record.get("startup")))
                return "\n".join(t for t in texts if t) or "Resident memory of the engine process"
            return f"{record['name']}\n{record['path']}"
        if role == Qt.ItemDataRole.ForegroundRole and column == STATE_COLUMN and record["state"] == ModelState.FAILED:
            return _FAILED_COLOUR
        if role == MODEL_ID_ROLE:
            return record["id"]
        return None

    @staticmethod
    def _unknown(role: int) -> str | None:
        if role == Qt.ItemDataRole.DisplayRole:
            return state_word(None)
        if role == Qt.ItemDataRole.ToolTipRole:
            return UNKNOWN_STATE
        return None

    @staticmethod
    def _display(record: ModelRecord, column: int) -> str:
        if column == MODEL_COLUMN:
            return str(record["id"])
        if column == STATE_COLUMN:
            return state_word(str(record["state"]))
        if column == SIZE_COLUMN:
            return format_bytes(record.get("size_bytes"))
        memory = record.get("memory")
        if memory and record.get("rss_bytes") is not None:
            return f"{format_bytes(record['rss_bytes'])} (prediction {memory['error_at_load']:+.0%})"
        return format_bytes(record.get("rss_bytes"))

    def set_models(self, models: list[ModelRecord]) -> None:
        """Replace every row with a snapshot from the service."""
        if [m["id"] for m in models] == [r["id"] for r in self._rows]:
            # Same models: update in place so that the view keeps its selection.
            self._rows = [m.copy() for m in models]
            self._states_known = True
            self._emit_changed(0, len(self._rows) - 1)
            return
        self.beginResetModel()
        self._rows = [m.copy() for m in models]
        self._states_known = True
        self.endResetModel()

    @property
    def states_known(self) -> bool:
        """False while the service is out of reach: `state_of` is then None for every model."""
        return self._states_known

    def forget_states(self) -> None:
        """The service is out of reach: its engines may run, stop or be gone with it; until its next snapshot
        (`set_models`) every model's state and memory read as unknown."""
        if self._states_known:
            self._states_known = False
            self._emit_changed(0, len(self._rows) - 1)

    def apply_engine_event(self, event: EngineEvent) -> None:
        """Take an engine event (state, message, pid, port) into its model's row."""
        row = self.row_of(event["model_id"])
        if row < 0:
            return
        record = self._rows[row]
        record["state"], record["message"] = event["state"], event["message"]  # the _EVENT_FIELDS
        record["pid"], record["port"] = event["pid"], event["port"]
        if event["state"] == ModelState.STOPPED:
            record["rss_bytes"] = None
        self._emit_changed(row, row)

    def update_usage(self, models: list[ModelRecord]) -> None:
        """Take polled rows (memory, pid, restarts) without touching the state the events keep current."""
        for polled in models:
            row = self.row_of(polled["id"])
            if row < 0:
                continue
            record = self._rows[row]
            self._rows[row] = {**polled, "state": record["state"], "message": record["message"]}  # the _EVENT_FIELDS
            self._emit_changed(row, row)

    def _emit_changed(self, first: int, last: int) -> None:
        if last >= first:
            self.dataChanged.emit(self.index(first, 0), self.index(last, len(COLUMNS) - 1))

    def row_of(self, model_id: str) -> int:
        """The row of a model, or -1 when it is not listed."""
        return next((row for row, r in enumerate(self._rows) if r["id"] == model_id), -1)

    def record(self, model_id: str) -> ModelRecord | None:
        """A copy of a model's row, or None when it is not listed. Its state is the last the service sent: ask
        `state_of`, which knows when that is no longer known."""
        row = self.row_of(model_id)
        return self._rows[row].copy() if row >= 0 else None

    def state_of(self, model_id: str) -> ModelState | None:
        """A model's state; None when it is not listed, or while the service is out of reach."""
        row = self.row_of(model_id)
        return self._rows[row]["state"] if row >= 0 and self._states_known else None

    def model_ids(self) -> list[str]:
        return [str(r["id"]) for r in self._rows]
