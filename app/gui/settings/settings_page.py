"""The Settings tab: ports, API key, LAN exposure, models folder, Hugging Face token, idle TTL, theme, start at
login and what closing the window does. Everything is read and saved through the service (GET/PUT /api/settings);
settings that shape the listeners apply after a restart, which the page offers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QApplication,
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app import autostart
from app.api_types import EndpointRecord, SavedSettingsAnswer, SettingsAnswer, TlsRecord
from app.gui.common import quit_dialogs
from app.gui.connection.service_connection import ServiceConnection
from app.gui.settings.secrets_panel import SecretsPanel
from app.gui.settings.theme import THEME_LABELS, THEMES, apply_theme

MAX_TTL_S = 30 * 24 * 3600
LOOPBACK = "127.0.0.1"
ALL_ADDRESSES = "0.0.0.0"
# Labels of the settings that wait for a restart, as the page names them.
RESTART_LABELS = {
    "gateway_port": "endpoint port", "control_port": "control port", "bind_address": "network exposure",
    "cors_origins": "allowed web origins", "idle_ttl_s": "idle TTL", "models_dir": "models folder",
}  # fmt: skip


class LanExposureDialog(QDialog):
    """The guided step before the endpoint listens on the network: where it will be reachable, that it needs
    the API key, what that means, and an explicit confirmation. Without a key it explains and cannot proceed."""

    def __init__(self, lan: dict[str, Any], key_present: bool, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Expose the endpoint on the network")
        port = lan.get("port")
        addresses = [str(a) for a in lan.get("addresses") or []]
        urls = [f"https://{f'[{a}]' if ':' in a else a}:{port}/v1" for a in addresses]
        self.addresses_label = QLabel(
            "After a restart, other machines can reach the endpoint at:\n" + "\n".join(f"  {u}" for u in urls)
            if urls
            else "This machine has no network address other than loopback right now."
        )
        self.key_label = QLabel(
            "Every request must carry the API key (Settings \N{RIGHTWARDS ARROW} API key). It travels encrypted: "
            "the endpoint speaks HTTPS with a certificate ModelDeck makes, whose fingerprint Settings shows."
            if key_present
            else "The service runs without an API key (--no-api-key), so it cannot be exposed: anyone on the network "
            "could use it. Restart it with a key first."
        )
        self.warning_label = QLabel(str(lan.get("warning") or ""))
        self.confirm_check = QCheckBox("I understand: machines on my network can use this endpoint with the key")
        self.confirm_check.setEnabled(key_present)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.expose_button = self.buttons.addButton("Expose on the network", QDialogButtonBox.ButtonRole.AcceptRole)
        self.expose_button.setEnabled(False)
        layout = QVBoxLayout(self)
        for label in (self.addresses_label, self.key_label, self.warning_label):
            label.setWordWrap(True)
            label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            layout.addWidget(label)
        layout.addWidget(self.confirm_check)
        layout.addWidget(self.buttons)
        self.confirm_check.toggled.connect(self.expose_button.setEnabled)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)


class SettingsPage(QWidget):
    """Shows the saved settings, saves changes, and restarts the service when a change needs it."""

    sig_settings_applied = Signal(object)  # the saved settings (a dict), after a load or a save

    def __init__(
        self,
        connection: ServiceConnection,
        ask_confirmation: Callable[[QWidget, str, str], bool] | None = None,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self._connection = connection
        self._ask = ask_confirmation  # None: quit_dialogs' question, looked up when asked (tests answer it)
        self._answer: SettingsAnswer | None = None
        self.lan_dialog: LanExposureDialog | None = None
        self._fingerprint = ""  # SHA-256 of the endpoint's TLS certificate; empty: plain HTTP
        self._restarting = False
        self._build_widgets()
        self._build_layout()
        self._connect_signals()

    def _build_widgets(self) -> None:
        self.gateway_port_spin = QSpinBox()
        self.gateway_port_spin.setRange(1, 65535)
        self.gateway_port_spin.setAccessibleName("Endpoint port")
        self.control_port_spin = QSpinBox()
        self.control_port_spin.setRange(0, 65535)
        self.control_port_spin.setSpecialValueText("any free port")
        self.control_port_spin.setAccessibleName("Control API port")
        self.cors_edit = QLineEdit()
        self.cors_edit.setPlaceholderText("none (e.g. http://localhost:3000, comma-separated)")
        self.cors_edit.setAccessibleName("Allowed web origins")
        self.ttl_spin = QSpinBox()
        self.ttl_spin.setRange(0, MAX_TTL_S)
        self.ttl_spin.setSingleStep(60)
        self.ttl_spin.setSuffix(" s")
        self.ttl_spin.setSpecialValueText("never")
        self.ttl_spin.setAccessibleName("Idle TTL: stop engines unused for this long")
        self.models_dir_edit = QLineEdit()
        self.models_dir_edit.setPlaceholderText("the default folder")
        self.models_dir_edit.setAccessibleName("Models folder")
        self.browse_button = QPushButton("Choose\N{HORIZONTAL ELLIPSIS}")
        self.browse_button.setAccessibleName("Choose the models folder")
        self.key_edit = QLineEdit()
        self.key_edit.setReadOnly(True)
        self.key_edit.setEchoMode(QLineEdit.EchoMode.Password)
        self.key_edit.setAccessibleName("API key")
        self.reveal_button = QPushButton("Reveal")
        self.reveal_button.setAccessibleName("Reveal the API key")
        self.reveal_button.setCheckable(True)
        self.copy_button = QPushButton("Copy")
        self.copy_button.setAccessibleName("Copy the API key")
        self.regenerate_button = QPushButton("Regenerate\N{HORIZONTAL ELLIPSIS}")
        self.regenerate_button.setAccessibleName("Regenerate the API key")
        self.lan_label = QLabel("")
        self.lan_label.setWordWrap(True)
        self.tls_label = QLabel("")
        self.tls_label.setWordWrap(True)
        self.tls_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.tls_label.setAccessibleName("The endpoint's TLS certificate")
        self.copy_fingerprint_button = QPushButton("Copy fingerprint")
        self.copy_fingerprint_button.setAccessibleName("Copy the SHA-256 fingerprint of the endpoint's certificate")
        self.copy_fingerprint_button.setEnabled(False)
        self.lan_button = QPushButton("Expose on the network\N{HORIZONTAL ELLIPSIS}")
        self.lan_button.setAccessibleName("Expose the endpoint on the network")
        self.local_only_button = QPushButton("This computer only")
        self.local_only_button.setAccessibleName("Serve this computer only")
        self.secrets_panel = SecretsPanel(self._connection)
        self.theme_combo = QComboBox()
        for theme in THEMES:
            self.theme_combo.addItem(THEME_LABELS[theme], theme)
        self.theme_combo.setAccessibleName("Theme")
        self.start_at_login_check = QCheckBox("Start ModelDeck when I log in")
        self.start_at_login_check.setAccessibleName("Start ModelDeck when I log in")
        self.close_to_tray_check = QCheckBox("Keep serving from the tray when the window closes")
        self.close_to_tray_check.setAccessibleName("Keep serving from the tray when the window closes")
        self.save_button = QPushButton("Save")
        self.save_button.setAccessibleName("Save the settings")
        self.restart_label = QLabel("")
        self.restart_label.setWordWrap(True)
        self.restart_button = QPushButton("Restart the service")
        self.restart_button.setAccessibleName("Restart the service")
        self.restart_button.setEnabled(False)
        self.message_label = QLabel("")
        self.message_label.setWordWrap(True)
        self.message_label.setAccessibleName("Settings message")

    def _build_layout(self) -> None:
        endpoint = QGroupBox("Endpoint")
        form = QFormLayout(endpoint)
        form.addRow("Endpoint port", self.gateway_port_spin)
        form.addRow("Control API port", self.control_port_spin)
        form.addRow("Allowed web origins (CORS)", self.cors_edit)
        form.addRow("Stop idle engines after", self.ttl_spin)
        folder = QHBoxLayout()
        folder.addWidget(self.models_dir_edit, 1)
        folder.addWidget(self.browse_button)
        form.addRow("Models folder", folder)
        key = QGroupBox("API key")
        key_row = QHBoxLayout(key)
        for widget in (self.key_edit, self.reveal_button, self.copy_button, self.regenerate_button):
            key_row.addWidget(widget, 1 if widget is self.key_edit else 0)
        network = QGroupBox("Network")
        network_layout = QVBoxLayout(network)
        network_layout.addWidget(self.lan_label)
        network_layout.addWidget(self.tls_label)
        network_row = QHBoxLayout()
        network_row.addWidget(self.lan_button)
        network_row.addWidget(self.local_only_button)
        network_row.addWidget(self.copy_fingerprint_button)
        network_row.addStretch(1)
        network_layout.addLayout(network_row)
        window = QGroupBox("Window")
        window_form = QFormLayout(window)
        window_form.addRow("Theme", self.theme_combo)
        window_form.addRow(self.start_at_login_check)
        window_form.addRow(self.close_to_tray_check)
        actions = QHBoxLayout()
        actions.addWidget(self.save_button)
        actions.addWidget(self.restart_button)
        actions.addWidget(self.restart_label, 1)
        content = QWidget()
        layout = QVBoxLayout(content)
        for group in (endpoint, key, network, self.secrets_panel, window):
            layout.addWidget(group)
        layout.addLayout(actions)
        layout.addWidget(self.message_label)
        layout.addStretch(1)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setWidget(content)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(scroll)

    def _connect_signals(self) -> None:
        connection = self._connection
        connection.sig_settings_received.connect(self._on_connection_settings_received)
        connection.sig_settings_saved.connect(self._on_connection_settings_saved)
        connection.sig_settings_refused.connect(self._on_connection_settings_refused)
        connection.sig_endpoint_received.connect(self._on_connection_endpoint_received)
        connection.sig_service_restarted.connect(self._on_connection_service_restarted)
        connection.sig_status_changed.connect(self._on_connection_status_changed)
        connection.sig_error_occurred.connect(self._on_connection_error_occurred)
        self.reveal_button.toggled.connect(self._on_reveal_button_toggled)
        self.copy_button.clicked.connect(self._on_copy_button_clicked)
        self.copy_fingerprint_button.clicked.connect(self._on_copy_fingerprint_button_clicked)
        self.regenerate_button.clicked.connect(self._on_regenerate_button_clicked)
        self.browse_button.clicked.connect(self._on_browse_button_clicked)
        self.lan_button.clicked.connect(self.open_lan_dialog)
        self.local_only_button.clicked.connect(self._on_local_only_button_clicked)
        self.theme_combo.currentIndexChanged.connect(self._on_theme_combo_changed)
        self.save_button.clicked.connect(self.save)
        self.restart_button.clicked.connect(self._on_restart_button_clicked)

    # Showing -----------------------------------------------------------------------------------------------

    def refresh(self) -> None:
        self._connection.load_settings()

    def _show(self, answer: SettingsAnswer) -> None:
        self._answer = answer
        settings, running = answer["settings"], answer["running"]
        self.gateway_port_spin.setValue(int(settings["gateway_port"]))
        self.control_port_spin.setValue(int(settings["control_port"]))
        self.cors_edit.setText(", ".join(settings["cors_origins"]))
        self.ttl_spin.setValue(int(settings["idle_ttl_s"] or 0))
        self.models_dir_edit.setText(settings["models_dir"] or "")
        self.models_dir_edit.setPlaceholderText(f"the default folder ({running['models_dir']})")
        self.theme_combo.setCurrentIndex(max(0, THEMES.index(settings["theme"])))
        self.start_at_login_check.setChecked(bool(settings["start_at_login"]))
        self.close_to_tray_check.setChecked(bool(settings["close_to_tray"]))
        bind = settings["bind_address"]
        exposed = bind != LOOPBACK
        self.lan_label.setText(
            f"The endpoint is set to listen on {bind}: other machines on the network can use it with the API key."
            if exposed
            else "The endpoint answers this computer only (127.0.0.1)."
        )
        self.local_only_button.setEnabled(exposed)
        self.secrets_panel.show_state(answer["hf_token"])
        pending = [RESTART_LABELS.get(name, name) for name in answer["restart_required"]]
        self.restart_button.setEnabled(bool(pending))
        self.restart_label.setText(f"Applies after a restart: {', '.join(pending)}." if pending else "")
        if answer.get("problem"):
            self.message_label.setText(str(answer["problem"]))
        self.sig_settings_applied.emit(settings)

    @Slot(object)
    def _on_connection_settings_received(self, answer: SettingsAnswer) -> None:
        self._show(answer)

    @Slot(object)
    def _on_connection_settings_saved(self, answer: SavedSettingsAnswer) -> None:
        previous = self._answer["settings"] if self._answer else {}
        self._show(answer)
        self.message_label.setText("Saved.")
        wanted = bool(answer["settings"]["start_at_login"])
        if wanted != bool(previous.get("start_at_login")) or wanted != autostart.is_enabled():
            self._set_start_at_login(wanted)

    @Slot(str)
    def _on_connection_settings_refused(self, message: str) -> None:
        self.message_label.setText(f"Not saved: {message}")

    @Slot(object)
    def _on_connection_endpoint_received(self, info: EndpointRecord) -> None:
        key = info.get("api_key")
        self.key_edit.setText(str(key) if key else "")
        self.key_edit.setPlaceholderText("" if key else "none: the endpoint runs without a key")
        for button in (self.reveal_button, self.copy_button, self.regenerate_button):
            button.setEnabled(bool(key))
        self._show_tls(info.get("tls"))

    def _show_tls(self, tls: TlsRecord | None) -> None:
        self._fingerprint = str(tls["fingerprint_sha256"]) if tls else ""
        self.copy_fingerprint_button.setEnabled(bool(tls))
        if not tls:
            self.tls_label.setText("The endpoint speaks plain HTTP (TLS is used when it listens on the network).")
            return
        made_by = "a self-signed certificate made by ModelDeck" if tls.get("self_signed") else "your certificate"
        self.tls_label.setText(
            f"The endpoint speaks HTTPS with {made_by}.\nSHA-256 fingerprint: {self._fingerprint}\n"
            f"Clients trust the file {tls['cert_path']} (curl --cacert, Python's ssl cafile; see the snippets), "
            "or check this fingerprint when they first connect."
        )

    @Slot(str)
    def _on_connection_status_changed(self, _status: str) -> None:
        self.setEnabled(self._connection.is_connected)
        if self._connection.is_connected and not self._answer:
            self.refresh()

    @Slot(str)
    def _on_connection_error_occurred(self, message: str) -> None:
        if self._restarting:
            self._restarting = False
            self.message_label.setText(message)
            self.restart_button.setEnabled(self._connection.is_connected)

    @Slot()
    def _on_connection_service_restarted(self) -> None:
        self._restarting = False
        self.message_label.setText("The service restarted with the saved settings.")
        self.refresh()

    # Actions -----------------------------------------------------------------------------------------------

    def changes(self) -> dict[str, Any]:
        """The page's values, as PUT /api/settings takes them (the bind address has its own guided step)."""
        origins = [o.strip() for o in self.cors_edit.text().split(",") if o.strip()]
        changes: dict[str, Any] = {
            "gateway_port": self.gateway_port_spin.value(), "control_port": self.control_port_spin.value(),
            "cors_origins": origins, "idle_ttl_s": self.ttl_spin.value() or None,
            "models_dir": self.models_dir_edit.text().strip() or None, "theme": self.theme_combo.currentData(),
            "start_at_login": self.start_at_login_check.isChecked(),
        }  # fmt: skip
        saved = self._answer["settings"].get("close_to_tray") if self._answer else None
        if saved is not None or self.close_to_tray_check.isChecked():  # unchecked and never asked: still ask once
            changes["close_to_tray"] = self.close_to_tray_check.isChecked()
        return changes

    @Slot()
    def save(self) -> None:
        self.message_label.setText("Saving\N{HORIZONTAL ELLIPSIS}")
        self._connection.save_settings(self.changes())

    @Slot()
    def _on_restart_button_clicked(self) -> None:
        self._restarting = True
        self.restart_button.setEnabled(False)
        self.message_label.setText("Restarting the service\N{HORIZONTAL ELLIPSIS}")
        self._connection.restart()

    @Slot(bool)
    def _on_reveal_button_toggled(self, shown: bool) -> None:
        self.key_edit.setEchoMode(QLineEdit.EchoMode.Normal if shown else QLineEdit.EchoMode.Password)
        self.reveal_button.setText("Hide" if shown else "Reveal")

    @Slot()
    def _on_copy_button_clicked(self) -> None:
        QGuiApplication.clipboard().setText(self.key_edit.text())
        self.message_label.setText("Copied the API key to the clipboard.")

    @Slot()
    def _on_copy_fingerprint_button_clicked(self) -> None:
        QGuiApplication.clipboard().setText(self._fingerprint)
        self.message_label.setText("Copied the certificate's fingerprint to the clipboard.")

    @Slot()
    def _on_regenerate_button_clicked(self) -> None:
        question = "Programs using the current key will be refused until they are given the new one. Go on?"
        ask = self._ask or quit_dialogs.ask_confirmation
        if ask(self, "Regenerate the API key", question):
            self.message_label.setText("Regenerating the API key\N{HORIZONTAL ELLIPSIS}")
            self._connection.regenerate_api_key(
                lambda: self.message_label.setText("A new API key is in use."),
                lambda message: self.message_label.setText(f"Not replaced: {message}"),
            )

    @Slot()
    def _on_browse_button_clicked(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Models folder", self.models_dir_edit.text())
        if folder:
            self.models_dir_edit.setText(folder)

    @Slot()
    def open_lan_dialog(self) -> LanExposureDialog:
        """Open the LAN exposure step (window-modal, not blocking); it saves the address when confirmed."""
        answer = self._answer
        lan: dict[str, Any] = dict(answer["lan"]) if answer else {}
        key_present = bool(answer and answer["api_key"]["present"])
        dialog = self.lan_dialog = LanExposureDialog(lan, key_present, self)
        dialog.accepted.connect(self._on_lan_dialog_accepted)
        dialog.open()
        return dialog

    @Slot()
    def _on_lan_dialog_accepted(self) -> None:
        self._connection.save_settings({"bind_address": ALL_ADDRESSES}, confirm_lan_exposure=True)

    @Slot()
    def _on_local_only_button_clicked(self) -> None:
        self._connection.save_settings({"bind_address": LOOPBACK})

    @Slot(int)
    def _on_theme_combo_changed(self, _index: int) -> None:
        app = QApplication.instance()
        if isinstance(app, QApplication):
            apply_theme(app, str(self.theme_combo.currentData()))

    def _set_start_at_login(self, wanted: bool) -> None:
        def job() -> str:
            if wanted:
                return f"ModelDeck will start at login ({autostart.describe(autostart.enable())})."
            autostart.disable()
            return "ModelDeck will not start at login."

        self._connection.run_in_background(job, self.message_label.setText, self._on_autostart_failed)

    def _on_autostart_failed(self, message: str) -> None:
        self.message_label.setText(f"Start at login: {message}")
