"""Numbers of the Hub pages in words: sizes, rates, times left, counts; and the table helpers they share."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QLabel, QTableWidget, QTableWidgetItem

from app.byte_size import format_bytes

ERROR_STYLE = "color: #c0392b;"


def size_text(size: int | None) -> str:
    """Bytes as people read them, in the IEC units of every other page: 93.8 MiB, 4.1 GiB; unknown as a dash."""
    return format_bytes(size)


def rate_text(rate_bps: float | None) -> str:
    return f"{size_text(int(rate_bps))}/s" if rate_bps else "\N{EM DASH}"


def eta_text(seconds: float | None) -> str:
    if seconds is None:
        return "\N{EM DASH}"
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02} min" if hours else f"{minutes} min {secs:02} s" if minutes else f"{secs} s"


def count_text(value: int | None) -> str:
    return "\N{EM DASH}" if value is None else f"{value:,}"


def table(columns: tuple[str, ...], name: str) -> QTableWidget:
    """A read-only table of whole rows, one selected at a time."""
    widget = QTableWidget(0, len(columns))
    widget.setHorizontalHeaderLabels(list(columns))
    widget.setAccessibleName(name)
    widget.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    widget.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    widget.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
    widget.verticalHeader().hide()
    widget.setTabKeyNavigation(False)  # Tab leaves the table for the next control; arrows move between rows
    header = widget.horizontalHeader()
    header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
    header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
    return widget


def cell(text: str, key: str | None = None, align_right: bool = False) -> QTableWidgetItem:
    """A table cell; `key` (a model or download id) is kept under the user role for finding the row again."""
    item = QTableWidgetItem(text)
    if key is not None:
        item.setData(Qt.ItemDataRole.UserRole, key)
    if align_right:
        item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
    return item


def row_key(widget: QTableWidget, row: int) -> str | None:
    """The key kept in a row's first cell, or None."""
    item = widget.item(row, 0)
    key = item.data(Qt.ItemDataRole.UserRole) if item is not None else None
    return key if isinstance(key, str) else None


def selected_key(widget: QTableWidget) -> str | None:
    """The key of the selected row, or None."""
    rows = widget.selectionModel().selectedRows()
    return row_key(widget, rows[0].row()) if rows else None


def error_label() -> QLabel:
    """A label for a failure in words, hidden while there is none."""
    label = QLabel()
    label.setWordWrap(True)
    label.setStyleSheet(ERROR_STYLE)
    label.setAccessibleName("Error")
    label.setTextFormat(Qt.TextFormat.PlainText)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    label.hide()
    return label


def show_error(label: QLabel, message: str) -> None:
    label.setText(message)
    label.setVisible(bool(message))
