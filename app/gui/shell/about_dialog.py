"""Help > About ModelDeck: the version and build commit of the window and of the service, and each engine the
service can run with its version (a portable llama-server: the CPU variant it loads)."""

from __future__ import annotations

from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QLabel,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.api_types import AboutRecord
from app.gui.connection.service_connection import ServiceConnection
from app.version import provenance

ENGINE_COLUMNS = ("Engine", "Installed", "Details")


class AboutDialog(QDialog):
    """Asks the service once when opened; what it cannot say is shown as such, never guessed."""

    def __init__(self, connection: ServiceConnection, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("About ModelDeck")
        self._connection = connection
        window = provenance()
        self.window_label = QLabel(f"<b>ModelDeck {window.version}</b><br>Window: {_commit_text(window.commit)}")
        self.service_label = QLabel("Service: asking\N{HORIZONTAL ELLIPSIS}")
        self.service_label.setWordWrap(True)
        self.engine_table = QTableWidget(0, len(ENGINE_COLUMNS))
        self.engine_table.setHorizontalHeaderLabels(ENGINE_COLUMNS)
        self.engine_table.horizontalHeader().setStretchLastSection(True)
        self.engine_table.verticalHeader().setVisible(False)
        self.engine_table.setAccessibleName("Engines")
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(self.window_label)
        layout.addWidget(self.service_label)
        layout.addWidget(self.engine_table, 1)
        layout.addWidget(buttons)
        self.resize(720, 360)

    def refresh(self) -> None:
        """Ask the service for its version and engines; the answer fills the dialog when it comes."""
        self.service_label.setText("Service: asking\N{HORIZONTAL ELLIPSIS}")
        self._connection.call(lambda client: client.about(), self._on_about_received, self._on_about_failed)

    def _on_about_received(self, about: AboutRecord) -> None:
        self.service_label.setText(f"Service: ModelDeck {about.get('version')}, {_commit_text(about.get('commit'))}")
        engines = about["engines"]
        self.engine_table.setRowCount(len(engines))
        for row, (name, engine) in enumerate(sorted(engines.items())):
            installed = engine.get("version") or "yes" if engine.get("installed") else "no"
            for column, text in enumerate((name, str(installed), str(engine.get("detail") or ""))):
                self.engine_table.setItem(row, column, QTableWidgetItem(text))
        self.engine_table.resizeColumnsToContents()

    def _on_about_failed(self, message: str) -> None:
        self.service_label.setText(f"Service: not available ({message})")


def _commit_text(commit: object) -> str:
    return f"built from commit {commit[:12]}" if isinstance(commit, str) and commit else "build commit unknown"
