"""The chat's parameters panel: temperature, top_p, max tokens, seed, stop strings and the system prompt (with
presets), shown for the open conversation and saved with it on every change."""

from __future__ import annotations

from PySide6.QtCore import Signal, Slot
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QLabel,
    QPlainTextEdit,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.gui.chat.chat_store import ChatParams

MAX_STOP_STRINGS = 4  # what the endpoint accepts (app.service.gateway.validation)
MAX_TOKENS = 32_768
SEED_MAX = 2**31 - 1
SYSTEM_PRESETS = {
    "Helpful assistant": "You are a helpful assistant.",
    "Concise": "You are a helpful assistant. Answer in as few words as the question allows.",
    "Programmer": "You are an expert programmer. Answer with working code in fenced Markdown blocks, then explain "
    "briefly.",
    "No system prompt": "",
}
CUSTOM = "Custom"


class ChatParamsPanel(QWidget):
    """Edits one ChatParams; `sig_params_changed` carries the new value after each edit by the person."""

    sig_params_changed = Signal(object)  # ChatParams

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._showing = False  # set while show_params fills the controls: those are not edits
        self.temperature_spin = QDoubleSpinBox()
        self.temperature_spin.setRange(0.0, 2.0)
        self.temperature_spin.setSingleStep(0.1)
        self.temperature_spin.setDecimals(2)
        self.temperature_spin.setAccessibleName("Temperature")
        self.top_p_spin = QDoubleSpinBox()
        self.top_p_spin.setRange(0.0, 1.0)
        self.top_p_spin.setSingleStep(0.05)
        self.top_p_spin.setDecimals(2)
        self.top_p_spin.setAccessibleName("Top p")
        self.max_tokens_spin = QSpinBox()
        self.max_tokens_spin.setRange(1, MAX_TOKENS)
        self.max_tokens_spin.setAccessibleName("Maximum tokens of an answer")
        self.seed_check = QCheckBox("Fixed &seed")
        self.seed_check.setAccessibleName("Use a fixed seed")
        self.seed_check.setToolTip("The same seed, prompt and parameters give the same answer")
        self.seed_spin = QSpinBox()
        self.seed_spin.setRange(0, SEED_MAX)
        self.seed_spin.setAccessibleName("Seed")
        self.stop_edit = QPlainTextEdit()
        self.stop_edit.setPlaceholderText(f"One per line, up to {MAX_STOP_STRINGS}")
        self.stop_edit.setAccessibleName("Stop strings, one per line")
        self.stop_edit.setTabChangesFocus(True)
        self.stop_edit.setFixedHeight(self.fontMetrics().lineSpacing() * 3 + 12)
        self.preset_combo = QComboBox()
        self.preset_combo.addItems([*SYSTEM_PRESETS, CUSTOM])
        self.preset_combo.setAccessibleName("System prompt preset")
        self.system_edit = QPlainTextEdit()
        self.system_edit.setAccessibleName("System prompt")
        self.system_edit.setTabChangesFocus(True)
        self.system_edit.setFixedHeight(self.fontMetrics().lineSpacing() * 4 + 12)
        heading = QLabel("Parameters, saved with this chat")
        font = heading.font()
        font.setBold(True)
        heading.setFont(font)
        layout = QVBoxLayout(self)
        layout.addWidget(heading)
        form = QFormLayout()
        layout.addLayout(form)
        layout.addStretch(1)
        form.addRow("&Temperature:", self.temperature_spin)
        form.addRow("Top &p:", self.top_p_spin)
        form.addRow("Max t&okens:", self.max_tokens_spin)
        form.addRow(self.seed_check, self.seed_spin)
        form.addRow("Stop st&rings:", self.stop_edit)
        form.addRow("Pr&eset:", self.preset_combo)
        form.addRow(self.system_edit)
        self.show_params(ChatParams())
        for spin in (self.temperature_spin, self.top_p_spin, self.seed_spin):
            spin.valueChanged.connect(self._on_control_edited)
        self.max_tokens_spin.valueChanged.connect(self._on_control_edited)
        self.seed_check.toggled.connect(self._on_control_edited)
        self.stop_edit.textChanged.connect(self._on_control_edited)
        self.system_edit.textChanged.connect(self._on_control_edited)
        self.preset_combo.activated.connect(self._on_preset_combo_activated)

    def params(self) -> ChatParams:
        stop = tuple(line for line in self.stop_edit.toPlainText().split("\n") if line)[:MAX_STOP_STRINGS]
        return ChatParams(
            temperature=round(self.temperature_spin.value(), 2),
            top_p=round(self.top_p_spin.value(), 2),
            max_tokens=self.max_tokens_spin.value(),
            seed=self.seed_spin.value() if self.seed_check.isChecked() else None,
            stop=stop,
            system_prompt=self.system_edit.toPlainText(),
        )

    def show_params(self, params: ChatParams) -> None:
        """Show a conversation's parameters (not an edit: nothing is emitted)."""
        self._showing = True
        try:
            self.temperature_spin.setValue(params.temperature if params.temperature is not None else 0.8)
            self.top_p_spin.setValue(params.top_p if params.top_p is not None else 1.0)
            self.max_tokens_spin.setValue(params.max_tokens)
            self.seed_check.setChecked(params.seed is not None)
            self.seed_spin.setValue(params.seed or 0)
            self.seed_spin.setEnabled(params.seed is not None)
            self.stop_edit.setPlainText("\n".join(params.stop))
            self.system_edit.setPlainText(params.system_prompt)
            self._show_preset(params.system_prompt)
        finally:
            self._showing = False

    def _show_preset(self, prompt: str) -> None:
        name = next((name for name, text in SYSTEM_PRESETS.items() if text == prompt), CUSTOM)
        self.preset_combo.setCurrentText(name)

    @Slot()
    def _on_control_edited(self) -> None:
        if self._showing:
            return
        self.seed_spin.setEnabled(self.seed_check.isChecked())
        self._showing = True
        try:
            self._show_preset(self.system_edit.toPlainText())
        finally:
            self._showing = False
        self.sig_params_changed.emit(self.params())

    @Slot(int)
    def _on_preset_combo_activated(self, index: int) -> None:
        name = self.preset_combo.itemText(index)
        if name in SYSTEM_PRESETS:
            self.system_edit.setPlainText(SYSTEM_PRESETS[name])  # emits through textChanged
