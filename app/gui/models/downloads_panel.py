"""The service's downloads: a progress bar, rate and time left for each, and pause, resume and cancel."""

from __future__ import annotations

import functools

from PySide6.QtCore import Signal, Slot
from PySide6.QtWidgets import QHBoxLayout, QLabel, QProgressBar, QPushButton, QVBoxLayout, QWidget

from app.api_types import DownloadRecord
from app.client import ControlClient
from app.gui.common.hub_format import cell, error_label, eta_text, rate_text, selected_key, show_error, size_text, table
from app.gui.connection.service_connection import ServiceConnection

COLUMNS = ("Model", "Variant", "Progress", "Size", "Rate", "Time left", "State")
PROGRESS_COLUMN = 2
STATE_WORDS = {
    "running": "Downloading",
    "paused": "Paused",
    "cancelled": "Cancelled",
    "failed": "Failed",
    "completed": "Done",
}
ACTIONS = {"pause": ("running",), "resume": ("paused", "failed"), "cancel": ("running", "paused", "failed")}


class DownloadsPanel(QWidget):
    """Every download of the service, live from its `download` events. Emits `sig_download_finished` with the
    record of a download that completed while the panel watched."""

    sig_download_finished = Signal(object)

    def __init__(self, connection: ServiceConnection, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._connection = connection
        self._records: dict[str, DownloadRecord] = {}
        self._rows: dict[str, int] = {}
        self.table_widget = table(COLUMNS, "Downloads")
        self.buttons = {action: QPushButton(action.capitalize()) for action in ACTIONS}
        for action, button in self.buttons.items():
            button.setAccessibleName(f"{action.capitalize()} the selected download")
            button.setEnabled(False)
            button.clicked.connect(functools.partial(self._on_action_button_clicked, action))
        self.error_label = error_label()
        self._build_layout()
        self.table_widget.itemSelectionChanged.connect(self._on_table_selection_changed)
        connection.sig_download_changed.connect(self._on_connection_download_changed)

    def _build_layout(self) -> None:
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(QLabel("Downloads"))
        layout.addWidget(self.table_widget, 1)
        row = QHBoxLayout()
        for button in self.buttons.values():
            row.addWidget(button)
        row.addStretch(1)
        layout.addLayout(row)
        layout.addWidget(self.error_label)

    def refresh(self) -> None:
        """Ask the service for every download (on connecting; events keep the list current afterwards)."""
        self._connection.call(lambda client: client.downloads(), self._on_downloads_received, self._show_failure)

    def show_record(self, record: DownloadRecord) -> None:
        """Show a download the service just accepted, unless its events got here first (they are newer)."""
        if record["id"] not in self._records:
            self._show(record)

    def record(self, download_id: str) -> DownloadRecord | None:
        return self._records.get(download_id)

    def select(self, download_id: str) -> None:
        row = self._rows.get(download_id)
        if row is not None:
            self.table_widget.selectRow(row)

    def _on_downloads_received(self, records: list[DownloadRecord]) -> None:
        for record in records:
            self.show_record(record)

    @Slot(object)
    def _on_connection_download_changed(self, record: DownloadRecord) -> None:
        before = self._records.get(record["id"])
        self._show(record)
        if record["state"] == "completed" and (before is None or before["state"] != "completed"):
            self.sig_download_finished.emit(record)

    def _show(self, record: DownloadRecord) -> None:
        download_id = record["id"]
        self._records[download_id] = record
        row = self._rows.get(download_id)
        if row is None:
            row = self._rows[download_id] = self.table_widget.rowCount()
            self.table_widget.insertRow(row)
            bar = QProgressBar()
            bar.setAccessibleName(f"Progress of {record['repo']}")
            self.table_widget.setCellWidget(row, PROGRESS_COLUMN, bar)
        total, done = int(record["total"] or 0), int(record["done"] or 0)
        running = record["state"] == "running"
        texts = {
            0: record["repo"],
            1: record["variant"],
            3: f"{size_text(done)} of {size_text(total)}",
            4: rate_text(record["rate_bps"]) if running else "\N{EM DASH}",
            5: eta_text(record["eta_s"]) if running else "\N{EM DASH}",
            6: STATE_WORDS.get(record["state"], record["state"]),
        }
        if running and record.get("phase") == "verify" and record.get("check_total"):
            # Hashing a big file takes a while: say so, or the finished bar looks stuck.
            texts[6] = f"Verifying {100 * int(record['checked']) // int(record['check_total'])} %"
        for column, text in texts.items():
            item = cell(text, download_id if column == 0 else None, align_right=column in (3, 4, 5))
            if column == 6 and (error := record.get("error")):
                item.setToolTip(error)
            self.table_widget.setItem(row, column, item)
        progress = self.table_widget.cellWidget(row, PROGRESS_COLUMN)
        if isinstance(progress, QProgressBar):
            # Per mille: a progress bar's range is an int, and a multi-GB byte count is not.
            progress.setRange(0, 1000)
            progress.setValue(round(1000 * done / total) if total else 0)
        if download_id == selected_key(self.table_widget):
            self._on_table_selection_changed()

    @Slot()
    def _on_table_selection_changed(self) -> None:
        record = self._selected_record()
        self._update_buttons(record)
        show_error(self.error_label, str(record.get("error") or "") if record else "")

    def _selected_record(self) -> DownloadRecord | None:
        download_id = selected_key(self.table_widget)
        return self._records.get(download_id) if download_id else None

    def _update_buttons(self, record: DownloadRecord | None) -> None:
        for action, button in self.buttons.items():
            button.setEnabled(record is not None and record["state"] in ACTIONS[action])

    def _on_action_button_clicked(self, action: str) -> None:
        download_id = selected_key(self.table_widget)
        if download_id is None:
            return
        for button in self.buttons.values():
            button.setEnabled(False)  # until the service's answer or event says what is possible now
        job = functools.partial(_control, download_id=download_id, action=action)
        # The answer may arrive after the event that followed it (they come on different connections): the
        # events alone change the records.
        self._connection.call(job, lambda _record: self._update_buttons(self._selected_record()), self._show_failure)

    def _show_failure(self, message: str) -> None:
        show_error(self.error_label, message)
        self._update_buttons(self._selected_record())


def _control(client: ControlClient, download_id: str, action: str) -> DownloadRecord:
    return client.control_download(download_id, action)
