"""Models: every model the service can serve, its size on disk and origin, verify, delete (after asking) and
import of GGUF files through a file dialog or by dropping them on the page; the disk space left."""

from __future__ import annotations

import functools
from pathlib import Path

from PySide6.QtCore import QMimeData, Slot
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QFileDialog, QHBoxLayout, QLabel, QMessageBox, QPushButton, QVBoxLayout, QWidget

from app.api_types import (
    ACTIVE,
    LAUNCHABLE,
    DeletedRecord,
    EngineEvent,
    ImportedRecord,
    LibraryEntry,
    LibraryRecord,
    ModelRecord,
    ModelState,
    VerdictRecord,
)
from app.client import ControlClient
from app.gui.common.hub_format import cell, error_label, row_key, selected_key, show_error, size_text, table
from app.gui.common.load_dialog import LoadDialog
from app.gui.common.state_words import state_word
from app.gui.connection.latest_call import LatestCall
from app.gui.connection.service_connection import ServiceConnection

COLUMNS = ("Model", "Source", "Size on disk", "State", "File")
SOURCE_WORDS = {"bundled": "Bundled", "hub": "Hugging Face Hub", "local": "Imported"}


def gguf_paths(mime: QMimeData) -> list[Path]:
    """The local .gguf files among dropped URLs."""
    return [Path(url.toLocalFile()) for url in mime.urls() if url.isLocalFile() and url.toLocalFile().endswith(".gguf")]


class LibraryPage(QWidget):
    """The library, read from the service whenever its set of models changes."""

    def __init__(self, connection: ServiceConnection, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._connection = connection
        self._library_call = LatestCall(connection, self)
        self._models: dict[str, LibraryEntry] = {}
        self._states_known = False  # False while the service is out of reach: the entries' states are stale
        self.confirm_box: QMessageBox | None = None
        self.file_dialog: QFileDialog | None = None
        self.setAcceptDrops(True)
        self.models_table = table(COLUMNS, "Models in the library")
        self.disk_label = QLabel()
        self.disk_label.setAccessibleName("Free disk space")
        self.disk_label.setWordWrap(True)
        self.verify_button = QPushButton("Verify")
        self.verify_button.setAccessibleName("Verify the selected model's files")
        # Load and Eject: start and stop the selected model's engine, as Launch and Stop do on Home and Run.
        self.load_button = QPushButton("Load")
        self.load_button.setAccessibleName("Load the selected model into an engine")
        self.eject_button = QPushButton("Eject")
        self.eject_button.setAccessibleName("Eject the selected model from memory")
        self.delete_button = QPushButton("Delete\N{HORIZONTAL ELLIPSIS}")
        self.delete_button.setAccessibleName("Delete the selected model")
        self.import_button = QPushButton("Import GGUF\N{HORIZONTAL ELLIPSIS}")
        self.import_button.setAccessibleName("Import a GGUF file into the library")
        self.load_settings_button = QPushButton("Load settings\N{HORIZONTAL ELLIPSIS}")
        self.load_settings_button.setAccessibleName("Load settings of the selected model")
        self.load_dialog: LoadDialog | None = None
        self.result_label = QLabel("Drop .gguf files here to import them.")
        self.result_label.setAccessibleName("Result")
        self.result_label.setWordWrap(True)
        self.error_label = error_label()
        self._build_layout()
        self._update_buttons()
        self.models_table.itemSelectionChanged.connect(self._update_buttons)
        self.verify_button.clicked.connect(self._on_verify_button_clicked)
        self.load_button.clicked.connect(self._on_load_button_clicked)
        self.eject_button.clicked.connect(self._on_eject_button_clicked)
        self.delete_button.clicked.connect(self._on_delete_button_clicked)
        self.import_button.clicked.connect(self._on_import_button_clicked)
        self.load_settings_button.clicked.connect(self._on_load_settings_button_clicked)
        connection.sig_models_received.connect(self._on_connection_models_received)
        connection.sig_engine_changed.connect(self._on_connection_engine_changed)
        connection.sig_status_changed.connect(self._on_connection_status_changed)

    def _build_layout(self) -> None:
        layout = QVBoxLayout(self)
        layout.addWidget(self.models_table, 1)
        row = QHBoxLayout()
        for button in (
            self.load_button,
            self.eject_button,
            self.load_settings_button,
            self.verify_button,
            self.delete_button,
            self.import_button,
        ):
            row.addWidget(button)
        row.addStretch(1)
        layout.addLayout(row)
        layout.addWidget(self.result_label)
        layout.addWidget(self.error_label)
        layout.addWidget(self.disk_label)

    def refresh(self) -> None:
        self._library_call.run(lambda client: client.library(), self._on_library_received, self._show_failure)

    def model(self, model_id: str) -> LibraryEntry | None:
        return self._models.get(model_id)

    def select(self, model_id: str) -> None:
        for row in range(self.models_table.rowCount()):
            if row_key(self.models_table, row) == model_id:
                self.models_table.selectRow(row)

    # From the service ----------------------------------------------------------------------------------

    @Slot(object)
    def _on_connection_models_received(self, _models: list[ModelRecord]) -> None:
        self.refresh()  # a snapshot: the set of models may have changed (a download finished, an import)

    @Slot(object)
    def _on_connection_engine_changed(self, event: EngineEvent) -> None:
        record = self._models.get(event["model_id"])
        if record is not None:
            record["state"] = event["state"]
            self._fill()

    @Slot(str)
    def _on_connection_status_changed(self, _status: str) -> None:
        if not self._connection.is_connected and self._states_known:
            self._states_known = False  # known again with the library of the service connected next
            self._fill()

    def _on_library_received(self, library: LibraryRecord) -> None:
        self._models = {entry["id"]: entry for entry in library["models"]}
        self._states_known = True
        self._fill()
        places = [f"{size_text(d['free'])} free in the {d['what']} ({d['path']})" for d in library["disk"]]
        self.disk_label.setText("; ".join(places) + ".")

    def _fill(self) -> None:
        chosen = selected_key(self.models_table)
        self.models_table.setRowCount(0)
        for entry in self._models.values():
            row = self.models_table.rowCount()
            self.models_table.insertRow(row)
            name = cell(entry["name"], entry["id"])
            name.setToolTip(f"Model id: {entry['id']}")
            items = [
                name,
                cell(SOURCE_WORDS.get(entry["source"], entry["source"])),
                cell(size_text(entry["size_on_disk"]), align_right=True),
                cell(state_word(self._state_of(entry))),
                cell(entry["path"]),
            ]
            for column, item in enumerate(items):
                self.models_table.setItem(row, column, item)
        if chosen is not None:
            self.select(chosen)
        self._update_buttons()

    # Actions -------------------------------------------------------------------------------------------

    @Slot()
    def _update_buttons(self) -> None:
        # While the service is out of reach, each of these would only be refused: none acts on a stale entry.
        entry = self._models.get(selected_key(self.models_table) or "") if self._states_known else None
        self.verify_button.setEnabled(entry is not None)
        self.load_settings_button.setEnabled(entry is not None)
        self.delete_button.setEnabled(entry is not None and bool(entry["deletable"]))
        state = entry.get("state") if entry is not None else None
        self.delete_button.setToolTip("Eject the model before deleting it." if state in ACTIVE else "")
        self.load_button.setEnabled(state in LAUNCHABLE)
        self.eject_button.setEnabled(state in ACTIVE)

    def _state_of(self, entry: LibraryEntry) -> ModelState | None:
        """None while the service is out of reach: what its engines do is unknown."""
        return entry.get("state") if self._states_known else None

    @Slot()
    def _on_load_button_clicked(self) -> None:
        model_id = selected_key(self.models_table)
        if model_id is not None:
            self.load_button.setEnabled(False)  # the engine's events enable the buttons again
            self._report(f"Loading {model_id}\N{HORIZONTAL ELLIPSIS}")
            self._connection.call(functools.partial(_load, model_id=model_id), lambda _r: None, self._show_failure)

    @Slot()
    def _on_eject_button_clicked(self) -> None:
        model_id = selected_key(self.models_table)
        if model_id is not None:
            self.eject_button.setEnabled(False)
            self._report(f"Ejecting {model_id}\N{HORIZONTAL ELLIPSIS}")
            self._connection.call(functools.partial(_eject, model_id=model_id), lambda _r: None, self._show_failure)

    @Slot()
    def _on_verify_button_clicked(self) -> None:
        model_id = selected_key(self.models_table)
        if model_id is None:
            return
        self.verify_button.setEnabled(False)
        self._report(f"Verifying {model_id}\N{HORIZONTAL ELLIPSIS}")
        job = functools.partial(_verify, model_id=model_id)
        self._connection.call(job, functools.partial(self._on_verified, model_id), self._show_failure)

    def _on_verified(self, model_id: str, verdict: VerdictRecord) -> None:
        self._update_buttons()
        headline = f"{model_id} is intact." if verdict["ok"] else f"{model_id} failed verification."
        self._report(" ".join([headline, *verdict["checks"]]))

    @Slot()
    def _on_delete_button_clicked(self) -> None:
        entry = self._models.get(selected_key(self.models_table) or "")
        if entry is None:
            return
        box = QMessageBox(QMessageBox.Icon.Warning, "Delete model", f"Delete {entry['name']}?", parent=self)
        box.setInformativeText(
            f"{size_text(entry['size_on_disk'])} will be freed. The files are removed from disk; "
            "a downloaded model can be downloaded again."
        )
        box.setStandardButtons(QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel)
        box.setDefaultButton(QMessageBox.StandardButton.Cancel)
        box.setAccessibleName("Confirm deletion")
        box.finished.connect(functools.partial(self._on_confirm_box_finished, box, entry["id"]))
        self.confirm_box = box
        box.open()  # not exec(): no nested event loop, and a test can answer it

    def _on_confirm_box_finished(self, box: QMessageBox, model_id: str, _result: int) -> None:
        self.confirm_box = None
        box.deleteLater()
        if box.clickedButton() is not box.button(QMessageBox.StandardButton.Yes):
            return
        self._report(f"Deleting {model_id}\N{HORIZONTAL ELLIPSIS}")
        job = functools.partial(_delete, model_id=model_id)
        self._connection.call(job, lambda _r: self._report(f"Deleted {model_id}."), self._show_failure)

    @Slot()
    def _on_load_settings_button_clicked(self) -> None:
        model_id = selected_key(self.models_table)
        if model_id is None:
            return
        if self.load_dialog is not None:
            self.load_dialog.close()
            self.load_dialog.deleteLater()
        self.load_dialog = LoadDialog(self._connection, model_id, self._state_of(self._models[model_id]), self)
        self.load_dialog.open()

    @Slot()
    def _on_import_button_clicked(self) -> None:
        dialog = QFileDialog(self, "Import a GGUF model", str(Path.home()), "GGUF models (*.gguf)")
        dialog.setFileMode(QFileDialog.FileMode.ExistingFiles)
        dialog.filesSelected.connect(lambda files: self.import_files([Path(f) for f in files]))
        dialog.finished.connect(dialog.deleteLater)
        self.file_dialog = dialog
        dialog.open()

    def import_files(self, files: list[Path]) -> None:
        """Ask the service to import each file; it checks the GGUF header before copying."""
        for file in files:
            self._report(f"Importing {file.name}\N{HORIZONTAL ELLIPSIS}")
            job = functools.partial(_import, path=str(file))
            self._connection.call(job, self._on_imported, self._show_failure)

    def _on_imported(self, model: ImportedRecord) -> None:
        self._report(f"Imported {model['name']} as {model['id']} ({size_text(model['size_on_disk'])}).")

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        if gguf_paths(event.mimeData()):
            event.acceptProposedAction()
        else:
            event.ignore()

    def dropEvent(self, event: QDropEvent) -> None:
        files = gguf_paths(event.mimeData())
        if files:
            event.acceptProposedAction()
            self.import_files(files)

    def _report(self, text: str) -> None:
        show_error(self.error_label, "")
        self.result_label.setText(text)

    def _show_failure(self, message: str) -> None:
        self.result_label.setText("")
        show_error(self.error_label, message)
        self._update_buttons()


def _load(client: ControlClient, model_id: str) -> ModelRecord:
    return client.start_model(model_id)


def _eject(client: ControlClient, model_id: str) -> ModelRecord:
    return client.stop_model(model_id)


def _verify(client: ControlClient, model_id: str) -> VerdictRecord:
    return client.verify_model(model_id)


def _delete(client: ControlClient, model_id: str) -> DeletedRecord:
    return client.delete_model(model_id)


def _import(client: ControlClient, path: str) -> ImportedRecord:
    return client.import_model(path)
