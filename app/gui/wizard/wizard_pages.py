"""The setup wizard's first three steps: this machine, what the user wants to do, and which model."""

from __future__ import annotations

from dataclasses import dataclass, field

from PySide6.QtCore import Qt, Slot
from PySide6.QtWidgets import (
    QAbstractItemView,
    QButtonGroup,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QRadioButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
    QWizardPage,
)

from app.api_types import HardwareRecord, ModelRecord, ModelState
from app.byte_size import format_bytes
from app.client import ControlClient
from app.gui.common.hub_format import error_label, show_error
from app.gui.common.plan_text import hardware_rows, problems_html, rows_html
from app.gui.connection.latest_call import LatestCall
from app.gui.connection.service_connection import ServiceConnection

DEFAULT_USERS = 8
MAX_USERS = 1024
MODEL_ID_ROLE = Qt.ItemDataRole.UserRole + 1


@dataclass
class WizardChoices:
    """What the user chose so far, and what the service said about it, shared by the pages."""

    hardware: HardwareRecord | None = None
    use: str = "chat"
    users: int | None = None
    model: ModelRecord | None = None  # the model's record from the service
    models: list[ModelRecord] = field(default_factory=list)


class HardwarePage(QWizardPage):
    """Step 1: the CPU, memory and GPUs of the machine the service runs on, and what stands in a GPU's way."""

    def __init__(self, connection: ServiceConnection, choices: WizardChoices, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setTitle("Your machine")
        self.setSubTitle("What ModelDeck found on the machine that serves the models.")
        self._choices = choices
        self._call = LatestCall(connection, self)
        self.summary_label = QLabel("Looking at this machine\N{HORIZONTAL ELLIPSIS}")
        self.summary_label.setAccessibleName("Hardware summary")
        self.summary_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.problems_label = QLabel()
        self.problems_label.setWordWrap(True)
        self.problems_label.setAccessibleName("GPU problems and advice")
        self.problems_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.error_label = error_label()
        self.refresh_button = QPushButton("Detect again")
        self.refresh_button.setAccessibleName("Detect the hardware again")
        layout = QVBoxLayout(self)
        layout.addWidget(self.summary_label)
        layout.addWidget(self.problems_label)
        layout.addWidget(self.error_label)
        layout.addStretch(1)
        layout.addWidget(self.refresh_button, 0, Qt.AlignmentFlag.AlignLeft)
        self.refresh_button.clicked.connect(self._on_refresh_button_clicked)

    def initializePage(self) -> None:
        self._load()

    def isComplete(self) -> bool:
        return self._choices.hardware is not None

    def cancel(self) -> None:
        self._call.cancel()

    def _load(self) -> None:
        self.refresh_button.setEnabled(False)
        show_error(self.error_label, "")
        self._call.run(ControlClient.hardware, self._on_hardware_loaded, self._on_hardware_failed)

    @Slot()
    def _on_refresh_button_clicked(self) -> None:
        self._load()

    def _on_hardware_loaded(self, profile: HardwareRecord) -> None:
        self._choices.hardware = profile
        self.refresh_button.setEnabled(True)
        self.summary_label.setText(rows_html(hardware_rows(profile)))
        problems = problems_html(profile)
        self.problems_label.setText(problems)
        self.problems_label.setVisible(bool(problems))
        self.completeChanged.emit()

    def _on_hardware_failed(self, message: str) -> None:
        self.refresh_button.setEnabled(True)
        self.summary_label.setText("")
        show_error(self.error_label, f"Could not read this machine's hardware: {message}")
        self.completeChanged.emit()


class UsePage(QWizardPage):
    """Step 2: chat alone, serve an app to N users, or work with long documents."""

    def __init__(self, choices: WizardChoices, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setTitle("What do you want to do?")
        self.setSubTitle("The context length, the engine and how much memory to set aside follow from this.")
        self._choices = choices
        self.chat_radio = QRadioButton("Chat with it myself")
        self.serve_radio = QRadioButton("Serve an app to several users at once")
        self.long_radio = QRadioButton("Work with long documents")
        for radio, words in (
            (self.chat_radio, "Use: chat alone"),
            (self.serve_radio, "Use: serve an app to several users"),
            (self.long_radio, "Use: long documents"),
        ):
            radio.setAccessibleName(words)
        self.users_spin = QSpinBox()
        self.users_spin.setRange(1, MAX_USERS)
        self.users_spin.setValue(DEFAULT_USERS)
        self.users_spin.setSuffix(" users")
        self.users_spin.setAccessibleName("Number of users at once")
        self.button_group = QButtonGroup(self)
        for radio in (self.chat_radio, self.serve_radio, self.long_radio):
            self.button_group.addButton(radio)
        self.chat_radio.setChecked(True)
        serve_row = QHBoxLayout()
        serve_row.addWidget(self.serve_radio)
        serve_row.addWidget(self.users_spin)
        serve_row.addStretch(1)
        layout = QVBoxLayout(self)
        layout.addWidget(self.chat_radio)
        layout.addLayout(serve_row)
        layout.addWidget(self.long_radio)
        layout.addStretch(1)
        self.serve_radio.toggled.connect(self._on_serve_radio_toggled)
        self.users_spin.setEnabled(False)

    @Slot(bool)
    def _on_serve_radio_toggled(self, checked: bool) -> None:
        self.users_spin.setEnabled(checked)

    def use(self) -> str:
        if self.serve_radio.isChecked():
            return "serve"
        return "long-context" if self.long_radio.isChecked() else "chat"

    def validatePage(self) -> bool:
        self._choices.use = self.use()
        self._choices.users = self.users_spin.value() if self._choices.use == "serve" else None
        return True


class ModelPage(QWizardPage):
    """Step 3: a model from the library, the bundled one first."""

    def __init__(self, connection: ServiceConnection, choices: WizardChoices, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setTitle("Which model?")
        self.setSubTitle("The models in ModelDeck's library.")
        self._choices = choices
        self._call = LatestCall(connection, self)
        self.model_list = QListWidget()
        self.model_list.setAccessibleName("Models")
        self.model_list.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.note_label = QLabel()
        self.note_label.setWordWrap(True)
        self.error_label = error_label()
        layout = QVBoxLayout(self)
        layout.addWidget(self.model_list, 1)
        layout.addWidget(self.note_label)
        layout.addWidget(self.error_label)
        self.model_list.itemSelectionChanged.connect(self._on_model_list_selection_changed)

    def initializePage(self) -> None:
        show_error(self.error_label, "")
        self.note_label.setText("Reading the library\N{HORIZONTAL ELLIPSIS}")
        self._call.run(ControlClient.models, self._on_models_loaded, self._on_models_failed)

    def cancel(self) -> None:
        self._call.cancel()

    def isComplete(self) -> bool:
        return self.selected_model_id() is not None

    def selected_model_id(self) -> str | None:
        items = self.model_list.selectedItems()
        return str(items[0].data(MODEL_ID_ROLE)) if items else None

    def select_model(self, model_id: str) -> None:
        for row in range(self.model_list.count()):
            item = self.model_list.item(row)
            if item.data(MODEL_ID_ROLE) == model_id:
                self.model_list.setCurrentItem(item)

    def validatePage(self) -> bool:
        model_id = self.selected_model_id()
        self._choices.model = next((m for m in self._choices.models if m["id"] == model_id), None)
        return self._choices.model is not None

    def _on_models_loaded(self, models: list[ModelRecord]) -> None:
        previous = self.selected_model_id() or (self._choices.model["id"] if self._choices.model else None)
        plannable = [m for m in models if m.get("engine") != "external"]
        plannable.sort(key=lambda m: (m.get("source") != "bundled", str(m.get("name", m["id"])).lower()))
        self._choices.models = plannable
        self.model_list.clear()
        for record in plannable:
            text = f"{record['name']}  \N{EM DASH} {record['source']}, {format_bytes(record.get('size_bytes'))}"
            if record["state"] != ModelState.STOPPED:
                text += f", {record['state']}"
            item = QListWidgetItem(text)
            item.setData(MODEL_ID_ROLE, record["id"])
            item.setToolTip(str(record.get("path") or ""))
            self.model_list.addItem(item)
        skipped = len(models) - len(plannable)
        note = "" if plannable else "The library is empty: put a GGUF file in ModelDeck's models folder."
        if skipped:
            note += f" {skipped} external server(s) are not listed: ModelDeck does not run them."
        self.note_label.setText(note.strip())
        if plannable:
            self.select_model(previous or plannable[0]["id"])
            if self.selected_model_id() is None:
                self.model_list.setCurrentRow(0)
        self.completeChanged.emit()

    def _on_models_failed(self, message: str) -> None:
        self.note_label.setText("")
        show_error(self.error_label, f"Could not read the library: {message}")

    @Slot()
    def _on_model_list_selection_changed(self) -> None:
        self.completeChanged.emit()
