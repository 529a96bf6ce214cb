"""Discover: search the Hugging Face Hub through the service, open a model's page, download a variant."""

from __future__ import annotations

import functools

from PySide6.QtCore import Qt, Slot
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QLineEdit, QPushButton, QSplitter, QVBoxLayout, QWidget

from app.api_types import DownloadRecord, HubSearchResult
from app.client import ControlClient
from app.gui.common.hub_format import cell, count_text, error_label, selected_key, show_error, table
from app.gui.connection.latest_call import LatestCall
from app.gui.connection.service_connection import ServiceConnection
from app.gui.models.downloads_panel import DownloadsPanel
from app.gui.models.hub_model_panel import HubModelPanel

COLUMNS = ("Model", "Downloads", "Likes", "Updated", "Access")
SORTS = (("Most downloaded", "downloads"), ("Most liked", "likes"), ("Recently updated", "recent"))
FORMATS = (("GGUF (llama.cpp)", "gguf"), ("Safetensors (vLLM)", "safetensors"))


class DiscoverPage(QWidget):
    """Search results on the left, the chosen model's page on the right, the downloads below."""

    def __init__(self, connection: ServiceConnection, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._connection = connection
        self._search_call = LatestCall(connection, self)
        self.query_edit = QLineEdit()
        self.query_edit.setPlaceholderText("Search the Hugging Face Hub, e.g. qwen gguf")
        self.query_edit.setAccessibleName("Search text")
        self.sort_combo = QComboBox()
        self.sort_combo.setAccessibleName("Sort results by")
        for words, key in SORTS:
            self.sort_combo.addItem(words, key)
        self.format_combo = QComboBox()
        self.format_combo.setAccessibleName("Model format")
        for words, key in FORMATS:
            self.format_combo.addItem(words, key)
        self.search_button = QPushButton("Search")
        self.search_button.setAccessibleName("Search the Hub")
        self.status_label = QLabel()
        self.status_label.setAccessibleName("Search status")
        self.results_table = table(COLUMNS, "Search results")
        self.model_panel = HubModelPanel(connection)
        self.downloads_panel = DownloadsPanel(connection)
        self.error_label = error_label()
        self._build_layout()
        self.query_edit.returnPressed.connect(self.search)
        self.search_button.clicked.connect(self.search)
        self.sort_combo.currentIndexChanged.connect(self._on_sort_combo_changed)
        self.format_combo.currentIndexChanged.connect(self._on_sort_combo_changed)
        self.results_table.itemSelectionChanged.connect(self._on_results_selection_changed)
        self.model_panel.sig_download_started.connect(self._on_model_panel_download_started)

    def _build_layout(self) -> None:
        search_row = QHBoxLayout()
        search_row.addWidget(self.query_edit, 1)
        search_row.addWidget(self.format_combo)
        search_row.addWidget(self.sort_combo)
        search_row.addWidget(self.search_button)
        results = QWidget()
        results_layout = QVBoxLayout(results)
        results_layout.setContentsMargins(0, 0, 0, 0)
        results_layout.addWidget(self.results_table, 1)
        results_layout.addWidget(self.status_label)
        results_layout.addWidget(self.error_label)
        top = QSplitter(Qt.Orientation.Horizontal)
        top.addWidget(results)
        top.addWidget(self.model_panel)
        top.setSizes([520, 480])
        page = QSplitter(Qt.Orientation.Vertical)
        page.addWidget(top)
        page.addWidget(self.downloads_panel)
        page.setStretchFactor(0, 3)
        page.setStretchFactor(1, 1)
        layout = QVBoxLayout(self)
        layout.addLayout(search_row)
        layout.addWidget(page, 1)

    @Slot()
    def search(self) -> None:
        """Ask the Hub, through the service, for models matching the search text."""
        query, sort = self.query_edit.text().strip(), str(self.sort_combo.currentData())
        model_format = str(self.format_combo.currentData())
        self.status_label.setText("Searching\N{HORIZONTAL ELLIPSIS}")
        show_error(self.error_label, "")
        job = functools.partial(_search, query=query, sort=sort, model_format=model_format)
        self._search_call.run(job, self._on_results_received, self._on_search_failed)

    @Slot()
    def _on_sort_combo_changed(self) -> None:
        if self.results_table.rowCount():
            self.search()

    def _on_results_received(self, results: list[HubSearchResult]) -> None:
        self.results_table.setRowCount(0)
        for result in results:
            row = self.results_table.rowCount()
            self.results_table.insertRow(row)
            updated = (result.get("last_modified") or "")[:10] or "\N{EM DASH}"
            items = [
                cell(result["id"], result["id"]),
                cell(count_text(result["downloads"]), align_right=True),
                cell(count_text(result["likes"]), align_right=True),
                cell(updated),
                cell("gated" if result["gated"] else "open"),
            ]
            for column, item in enumerate(items):
                self.results_table.setItem(row, column, item)
        count = len(results)
        self.status_label.setText(f"{count} model{'s' if count != 1 else ''} found." if count else "No models found.")

    def _on_search_failed(self, message: str) -> None:
        self.status_label.setText("")
        show_error(self.error_label, message)

    @Slot()
    def _on_results_selection_changed(self) -> None:
        repo_id = selected_key(self.results_table)
        if repo_id is not None:
            self.model_panel.show_model(repo_id)

    @Slot(object)
    def _on_model_panel_download_started(self, record: DownloadRecord) -> None:
        self.downloads_panel.show_record(record)
        self.downloads_panel.select(record["id"])


def _search(client: ControlClient, query: str, sort: str, model_format: str) -> list[HubSearchResult]:
    return client.hub_search(query, sort, model_format=model_format)
