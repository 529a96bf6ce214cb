"""A Hub model's page: license and gated status, its GGUF variants with sizes and a badge each for how it would run
on the machine the service runs on (the service's planner decides), the one suggested, and a Download button."""

from __future__ import annotations

import functools
from html import escape

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtGui import QColor, QFont
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QTableWidgetItem, QVBoxLayout, QWidget

from app.api_types import DownloadRecord, HubModelPage
from app.client import ControlClient
from app.gui.common.hub_format import cell, error_label, selected_key, show_error, size_text, table
from app.gui.common.quality_format import loss_text
from app.gui.connection.latest_call import LatestCall
from app.gui.connection.service_connection import ServiceConnection

COLUMNS = ("Variant", "Size", "Files", "On this machine", "Expected quality loss")
FIT_COLUMN = 3
FIT_WORDS = {
    "gpu": ("Fits on the GPU", "#1e8449", "All its layers on the GPU: the fastest way to run it."),
    "partial": (
        "Partly offloaded",
        "#b9770e",
        "Some layers on the GPU, the rest on the CPU: slower than all on it.",
    ),
    "cpu": ("CPU only", "", "It runs on the CPU, from RAM."),
    "too_big": ("Too big", "#c0392b", "It does not fit in this machine's free memory with a safety margin."),
}
UNKNOWN_FIT = ("Unknown", "", "Its size is unknown or its files are incomplete: the planner cannot cost it.")
RECOMMENDED_MARK = "  \N{BLACK STAR} recommended"


class HubModelPanel(QWidget):
    """Shows one model's page, fetched through the service; emits `sig_download_started` with the new download."""

    sig_download_started = Signal(object)  # the download's record

    def __init__(self, connection: ServiceConnection, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._connection = connection
        self._page_call = LatestCall(connection, self)
        self._page: HubModelPage | None = None
        self.title_label = QLabel("Choose a model to see its files.")
        self.title_label.setAccessibleName("Model")
        self.title_label.setWordWrap(True)
        self.info_label = QLabel()
        self.info_label.setAccessibleName("License and access")
        self.info_label.setWordWrap(True)
        self.info_label.setTextFormat(Qt.TextFormat.RichText)
        self.info_label.setOpenExternalLinks(True)
        self.variants_table = table(COLUMNS, "Variants")
        self.basis_label = QLabel()
        self.basis_label.setAccessibleName("How the recommended variant was chosen")
        self.basis_label.setWordWrap(True)
        self.download_button = QPushButton("Download")
        self.download_button.setAccessibleName("Download the selected variant")
        self.download_button.setEnabled(False)
        self.error_label = error_label()
        self._build_layout()
        self.variants_table.itemSelectionChanged.connect(self._on_variants_selection_changed)
        self.download_button.clicked.connect(self._on_download_button_clicked)

    def _build_layout(self) -> None:
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.title_label)
        layout.addWidget(self.info_label)
        layout.addWidget(self.variants_table, 1)
        layout.addWidget(self.basis_label)
        row = QHBoxLayout()
        row.addWidget(self.download_button)
        row.addStretch(1)
        layout.addLayout(row)
        layout.addWidget(self.error_label)

    @property
    def page(self) -> HubModelPage | None:
        return self._page

    def show_model(self, repo_id: str) -> None:
        """Fetch and show `repo_id`'s page; an answer to an earlier choice is dropped."""
        self._page = None
        self.variants_table.setRowCount(0)
        self.info_label.clear()
        self.basis_label.clear()
        self.download_button.setEnabled(False)
        show_error(self.error_label, "")
        self.title_label.setText(f"Loading {repo_id}\N{HORIZONTAL ELLIPSIS}")
        job = functools.partial(_hub_model, repo_id=repo_id)
        self._page_call.run(job, self._on_page_received, self._on_page_failed)

    def _on_page_received(self, page: HubModelPage) -> None:
        self._page = page
        self.title_label.setText(page["id"])
        license_name = escape(page.get("license") or "unknown")
        url = escape(page["page_url"])
        if page["gated"]:
            access = f'gated: accept its license on <a href="{url}">its Hub page</a> before downloading'
        else:
            access = "not gated"
        self.info_label.setText(f"License: {license_name} \N{MIDDLE DOT} {access}")
        recommended = page.get("recommended")
        self.variants_table.setRowCount(0)
        for variant in page["variants"]:
            row = self.variants_table.rowCount()
            self.variants_table.insertRow(row)
            mark = RECOMMENDED_MARK if variant["name"] == recommended else ""
            items = [
                cell(variant["name"] + mark, variant["name"]),
                cell(size_text(variant["size"]), align_right=True),
                cell(str(len(variant["files"])), align_right=True),
                _fit_cell(variant["fit"]),
                cell(loss_text(variant.get("quality_loss"))),
            ]
            for column, item in enumerate(items):
                if mark:
                    font = QFont(item.font())
                    font.setBold(True)
                    item.setFont(font)
                self.variants_table.setItem(row, column, item)
            if mark:
                self.variants_table.selectRow(row)
        if not page["variants"]:
            self.basis_label.setText("This model has no GGUF files and no safetensors model ModelDeck can serve.")
        elif recommended is None:
            self.basis_label.setText(f"No variant is recommended: {page['recommendation_basis']}.")
        else:
            self.basis_label.setText(f"Recommended by a {page['recommendation_basis']}.")

    def _on_page_failed(self, message: str) -> None:
        self.title_label.setText("The model page could not be loaded.")
        show_error(self.error_label, message)

    @Slot()
    def _on_variants_selection_changed(self) -> None:
        self.download_button.setEnabled(self._page is not None and selected_key(self.variants_table) is not None)

    @Slot()
    def _on_download_button_clicked(self) -> None:
        variant = selected_key(self.variants_table)
        if self._page is None or variant is None:
            return
        self.download_button.setEnabled(False)
        show_error(self.error_label, "")
        job = functools.partial(_start_download, repo_id=self._page["id"], variant=variant)
        self._connection.call(job, self._on_download_started, self._on_download_failed)

    def _on_download_started(self, record: DownloadRecord) -> None:
        self._on_variants_selection_changed()
        self.sig_download_started.emit(record)

    def _on_download_failed(self, message: str) -> None:
        self._on_variants_selection_changed()
        show_error(self.error_label, f"The download did not start: {message}")


def fit_words(fit: str | None) -> str:
    """The badge text of a variant's fit as the service planned it ("gpu", "partial", "cpu", "too_big")."""
    return FIT_WORDS.get(fit or "", UNKNOWN_FIT)[0]


def _fit_cell(fit: str | None) -> QTableWidgetItem:
    words, colour, tip = FIT_WORDS.get(fit or "", UNKNOWN_FIT)
    item = cell(words)
    item.setToolTip(tip)
    if colour:
        item.setForeground(QColor(colour))
    return item


def _hub_model(client: ControlClient, repo_id: str) -> HubModelPage:
    return client.hub_model(repo_id)


def _start_download(client: ControlClient, repo_id: str, variant: str) -> DownloadRecord:
    return client.start_download(repo_id, variant)
