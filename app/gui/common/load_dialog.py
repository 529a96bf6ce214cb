"""The Load dialog: a model's load settings (context, GPU layers, threads, batch, engine, parallel slots, and
speculative decoding: a draft model on llama-server, prompt lookup on llama-cpp-python) with the memory they need,
by the service's planner, against what is free. Saved settings are used by every later start of the model
(app.service.launch.model_settings); "Save and load" also (re)starts it with them.

llama-server's slots share the context (its total is what the dialog shows), so changing the slots keeps what each
slot gets: the context grows or shrinks with them, up to the trained context per slot."""

from __future__ import annotations

import functools

from PySide6.QtCore import QTimer, Signal, Slot
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QLabel,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.api_types import ACTIVE, ModelSettingsRecord
from app.byte_size import format_bytes
from app.client import ControlClient
from app.gui.connection.latest_call import LatestCall
from app.gui.connection.service_connection import ServiceConnection

ELLIPSIS_TEXT = "\N{HORIZONTAL ELLIPSIS}"
NO_DRAFT = "None"
ESTIMATE_DELAY_MS = 300  # ask the planner once typing pauses, not on every keystroke
NUMBER_FIELDS = {
    "context": "&Context (tokens, all slots):",
    "gpu_layers": "&GPU layers:",
    "threads": "&Threads:",
    "batch": "&Batch size:",
    "parallel": "&Parallel slots:",
}
NAMES = {
    "context": "Context length in tokens, shared by the parallel slots",
    "gpu_layers": "Layers offloaded to the GPU",
    "threads": "CPU threads",
    "batch": "Prompt batch size",
    "parallel": "Requests served at once",
}


def memory_text(answer: ModelSettingsRecord) -> tuple[str, bool]:
    """The memory these settings need against what is free, in words, and whether it fits."""
    memory, free = answer.get("memory"), answer.get("free") or {}
    if not memory:
        return "The planner cannot predict this model's memory (its file lacks the facts it needs).", True
    ram, vram = memory["ram_bytes"], memory["vram_bytes"]
    free_ram, free_gpu = free.get("ram_bytes"), free.get("gpu_bytes")
    need = f"Needs about {format_bytes(ram)} of RAM"
    if vram:
        need += f" and {format_bytes(vram)} of GPU memory"
    have = f"{format_bytes(free_ram)} RAM free" if free_ram is not None else "free RAM unknown"
    if free_gpu is not None:
        have += f", {format_bytes(free_gpu)} GPU memory free"
    fits = (free_ram is None or ram <= free_ram) and (not vram or free_gpu is None or vram <= free_gpu)
    return f"{need}; {have}." + ("" if fits else " It may not fit."), fits


def save_and_load(client: ControlClient, model_id: str, settings: dict[str, int | str]) -> ModelSettingsRecord:
    """Save the settings, then start the model with them; one running with others is stopped first (the person
    asked for these by pressing the button)."""
    saved = client.save_model_settings(model_id, settings)
    record = next((m for m in client.models() if m["id"] == model_id), None)
    if record is not None and record["state"] in ACTIVE:
        plan = {**(record.get("plan") or {}), "engine": record.get("engine")}
        if any(plan.get(key) != value for key, value in saved["plan"].items()):
            client.stop_model(model_id)
    client.start_model(model_id)
    return saved


class LoadDialog(QDialog):
    """Shows and saves one model's load settings. `sig_saved` carries the service's answer after a save."""

    sig_saved = Signal(object)

    def __init__(
        self, connection: ServiceConnection, model_id: str, state: str | None, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self._connection = connection
        self.model_id = model_id
        self.state = state  # the model's state when the dialog opened
        # The settings read, then each save (the buttons allow one at a time).
        self._latest = LatestCall(connection, self)
        self._estimates = LatestCall(connection, self)  # for the values as edited, superseded by a save
        self._filling = False
        self._loading = False  # the save in flight also loads the model
        self._per_slot = 0  # the context each slot gets, as shown
        self._trained: int | None = None  # the most one slot may have (the model's trained context), if known
        self.answer: ModelSettingsRecord | None = None
        self.setWindowTitle(f"Load settings: {model_id}")
        self.spins: dict[str, QSpinBox] = {}
        form = QFormLayout()
        for name, label in NUMBER_FIELDS.items():
            spin = QSpinBox()
            spin.setRange(0, 1_000_000)
            spin.setAccessibleName(NAMES[name])
            spin.setEnabled(False)
            self.spins[name] = spin
            form.addRow(label, spin)
        self.engine_combo = QComboBox()
        self.engine_combo.setAccessibleName("Engine")
        self.engine_combo.setEnabled(False)
        form.insertRow(4, "&Engine:", self.engine_combo)
        self.draft_combo = QComboBox()
        self.draft_combo.setAccessibleName("Draft model for speculative decoding (llama-server)")
        self.draft_combo.setToolTip("A smaller model with the same vocabulary proposes tokens that this model checks "
                                    "in one step: the same answers, faster where it guesses well")  # fmt: skip
        self.lookup_spin = QSpinBox()
        self.lookup_spin.setAccessibleName("Prompt-lookup tokens per step (llama-cpp-python; 0: off)")
        self.lookup_spin.setToolTip("Drafts tokens from the prompt's own words; 0: off")
        form.addRow("D&raft model:", self.draft_combo)
        form.addRow("Prompt &lookup tokens:", self.lookup_spin)
        self.draft_label = QLabel("")
        self.draft_label.setWordWrap(True)
        self.draft_label.setAccessibleName("Why the draft model may draft")
        self.memory_label = QLabel(f"Asking the planner{ELLIPSIS_TEXT}")
        self.memory_label.setWordWrap(True)
        self.memory_label.setAccessibleName("Memory these settings need")
        self.status_label = QLabel("")
        self.status_label.setWordWrap(True)
        self.status_label.setAccessibleName("Load settings status")
        self.buttons = QDialogButtonBox()
        self.save_button = QPushButton("&Save")
        self.save_button.setAccessibleName("Save these settings for every later start")
        self.load_button = QPushButton("Save and &load")
        self.load_button.setAccessibleName("Save these settings and load the model with them")
        self.defaults_button = QPushButton("Use &defaults")
        self.defaults_button.setAccessibleName("Forget the saved settings")
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setAccessibleName("Close without saving")
        self.buttons.addButton(self.load_button, QDialogButtonBox.ButtonRole.AcceptRole)
        self.buttons.addButton(self.save_button, QDialogButtonBox.ButtonRole.ApplyRole)
        self.buttons.addButton(self.defaults_button, QDialogButtonBox.ButtonRole.ResetRole)
        self.buttons.addButton(self.cancel_button, QDialogButtonBox.ButtonRole.RejectRole)
        self.load_button.setDefault(True)
        for button in (self.save_button, self.load_button, self.defaults_button):
            button.setEnabled(False)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.draft_label)
        layout.addWidget(self.memory_label)
        layout.addWidget(self.status_label)
        layout.addWidget(self.buttons)
        self._estimate_timer = QTimer(self)
        self._estimate_timer.setSingleShot(True)
        self._estimate_timer.setInterval(ESTIMATE_DELAY_MS)
        self._estimate_timer.timeout.connect(self._on_estimate_timer_timeout)
        for spin in self.spins.values():
            spin.valueChanged.connect(self._on_value_edited)
        self.engine_combo.currentIndexChanged.connect(self._on_value_edited)
        self.draft_combo.currentIndexChanged.connect(self._on_value_edited)
        self.lookup_spin.valueChanged.connect(self._on_value_edited)
        self.spins["context"].valueChanged.connect(self._on_context_edited)
        self.spins["parallel"].valueChanged.connect(self._on_slots_edited)
        self.engine_combo.currentIndexChanged.connect(self._on_slots_edited)
        self.save_button.clicked.connect(self._on_save_button_clicked)
        self.load_button.clicked.connect(self._on_load_button_clicked)
        self.defaults_button.clicked.connect(self._on_defaults_button_clicked)
        self.cancel_button.clicked.connect(self.reject)
        self._latest.run(functools.partial(ControlClient.model_settings, model_id=model_id), self._on_answer,
                         self._on_failed)  # fmt: skip

    def values(self) -> dict[str, int | str]:
        """The settings as shown, under the service's names."""
        values: dict[str, int | str] = {name: spin.value() for name, spin in self.spins.items()}
        values["engine"] = self.engine_combo.currentText()
        if values["engine"] != "llama-server":
            values.pop("parallel")  # only llama-server serves more than one request at once
            if self.lookup_spin.value() > 0:
                values["lookup"] = self.lookup_spin.value()
        elif self.draft_combo.currentText() not in ("", NO_DRAFT):
            values["draft"] = self.draft_combo.currentText()
        return values

    def slots(self) -> int:
        """The requests served at once as shown: llama-server's parallel slots, one on the other engines."""
        return self.spins["parallel"].value() if self.engine_combo.currentText() == "llama-server" else 1

    def save(self, then_load: bool = False) -> None:
        values = self.values()
        self._busy(f"Saving{ELLIPSIS_TEXT}")
        self._loading = then_load
        save = save_and_load if then_load else ControlClient.save_model_settings
        self._latest.run(functools.partial(save, model_id=self.model_id, settings=values), self._on_saved,
                         self._on_failed)  # fmt: skip

    def _busy(self, text: str) -> None:
        """A save in flight: its answer carries the memory of what was saved, and the fields are filled from it."""
        self._estimate_timer.stop()
        self._estimates.cancel()
        self.status_label.setText(text)
        self._set_editable(False)

    def _set_editable(self, editable: bool) -> None:
        server = self.engine_combo.currentText() == "llama-server"
        for name, spin in self.spins.items():
            spin.setEnabled(editable and (name != "parallel" or server))
        self.engine_combo.setEnabled(editable and self.engine_combo.count() > 1)
        self.draft_combo.setEnabled(editable and server and self.draft_combo.count() > 1)
        self.lookup_spin.setEnabled(editable and not server)
        for button in (self.save_button, self.load_button, self.defaults_button):
            button.setEnabled(editable)

    def _show(self, answer: ModelSettingsRecord) -> None:
        """Fill the controls from an answer's plan and bounds (the saved settings, or the defaults)."""
        self.answer = answer
        self._filling = True
        try:
            bounds, plan = answer["bounds"], answer["plan"]
            for name, spin in self.spins.items():
                low, high = bounds[name]
                spin.setRange(int(low), int(high) if high is not None else 1_000_000)
                spin.setValue(int(plan[name]))
            self.engine_combo.clear()
            self.engine_combo.addItems(list(bounds["engine"]) or [str(plan["engine"])])
            self.engine_combo.setCurrentText(str(plan["engine"]))
            draft = str(plan.get("draft") or NO_DRAFT)
            self.draft_combo.clear()
            self.draft_combo.addItems(list(dict.fromkeys([NO_DRAFT, *answer.get("drafts", []), draft])))
            self.draft_combo.setCurrentText(draft)
            low, high = bounds.get("lookup", [0, 64])
            self.lookup_spin.setRange(int(low), int(high))
            self.lookup_spin.setValue(int(plan.get("lookup") or 0))
            # The route bounds the context by the trained context per slot of the plan it answers.
            high, slots = bounds["context"][1], max(1, int(plan["parallel"]))
            self._trained = int(high) // slots if high is not None else None
            self._per_slot = max(1, int(plan["context"]) // slots)
        finally:
            self._filling = False
        self._show_memory(answer)
        self._set_editable(True)
        self.status_label.setText("Saved settings." if answer.get("saved") else "The defaults (nothing saved yet).")

    def _show_memory(self, answer: ModelSettingsRecord) -> None:
        self.draft_label.setText(answer.get("draft_reason") or "")
        self.draft_label.setVisible(bool(answer.get("draft_reason")))
        text, fits = memory_text(answer)
        self.memory_label.setText(text)
        self.memory_label.setStyleSheet("" if fits else "color: #c0392b;")

    @Slot()
    def _on_value_edited(self) -> None:
        if self._filling:
            return
        server = self.engine_combo.currentText() == "llama-server"
        self.spins["parallel"].setEnabled(server)
        self.draft_combo.setEnabled(server and self.draft_combo.count() > 1)
        self.lookup_spin.setEnabled(not server)
        self.status_label.setText("Changed, not saved yet.")
        self._estimate_timer.start()

    @Slot()
    def _on_context_edited(self) -> None:
        if not self._filling:
            self._per_slot = max(1, self.spins["context"].value() // self.slots())

    @Slot()
    def _on_slots_edited(self) -> None:
        """Other slots, or another engine: each slot keeps the context it had (within its trained context)."""
        if self._filling or self.answer is None:
            return
        slots, per_slot, context = self.slots(), self._per_slot, self.spins["context"]
        context.setMaximum(self._trained * slots if self._trained is not None else 1_000_000)
        context.setValue(per_slot * slots)  # clamped to the range
        self._per_slot = per_slot  # not what a clamped value divides into

    @Slot()
    def _on_estimate_timer_timeout(self) -> None:
        values = self.values()
        estimate = functools.partial(ControlClient.estimate_model_settings, model_id=self.model_id, settings=values)
        self._estimates.run(estimate, self._show_memory, self.memory_label.setText)

    def _on_answer(self, answer: ModelSettingsRecord) -> None:
        self._show(answer)

    def _on_saved(self, answer: ModelSettingsRecord) -> None:
        self._show(answer)
        self.sig_saved.emit(answer)
        self.status_label.setText(f"Saved; loading the model{ELLIPSIS_TEXT}" if self._loading else "Saved.")

    def _on_failed(self, message: str) -> None:
        self.status_label.setText(message)
        self._set_editable(self.answer is not None)

    @Slot()
    def _on_save_button_clicked(self) -> None:
        self.save()

    @Slot()
    def _on_load_button_clicked(self) -> None:
        self.save(then_load=True)

    @Slot()
    def _on_defaults_button_clicked(self) -> None:
        self._busy(f"Forgetting the saved settings{ELLIPSIS_TEXT}")
        self._loading = False
        forget = functools.partial(ControlClient.save_model_settings, model_id=self.model_id, settings={})
        self._latest.run(forget, self._on_saved, self._on_failed)
