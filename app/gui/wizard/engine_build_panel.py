"""The wizard's remedy for a missing engine that would serve better: a button that builds it on the service's
machine, with the build's step and percent, a Cancel, and its error in one line."""

from __future__ import annotations

import functools

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtWidgets import QHBoxLayout, QLabel, QProgressBar, QPushButton, QVBoxLayout, QWidget

from app.api_types import EngineBuildListing, EngineBuildRecord, RecommendationRecord
from app.client import ControlClient
from app.gui.common.hub_format import error_label, show_error
from app.gui.common.plan_text import ENGINE_WORDS
from app.gui.connection.latest_call import LatestCall
from app.gui.connection.service_connection import ServiceConnection

# Engines the service builds (POST /api/engines/ENGINE/build).
BUILDABLE = ("llama-server",)
NOT_INSTALLED = "not installed"


def engine_to_build(result: RecommendationRecord) -> str | None:
    """The engine to offer a build of: one the service builds, missing here and lacking nothing else, that scores
    above the engine of the best plan for this use. None: nothing to build."""
    best = result.get("best")
    fits = {fit["engine"]: fit for fit in result.get("engines", [])}
    best_fit = fits.get(best["engine"]) if best else None
    for engine in BUILDABLE:
        fit = fits.get(engine)
        if fit is None or fit["installed"] is not False:
            continue
        if any(not lack.startswith(NOT_INSTALLED) for lack in fit["lacks"]):
            continue  # missing, and unfit besides: building it would not help
        if best_fit is None or fit["total"] > best_fit["total"]:
            return engine
    return None


def one_line(error: str) -> str:
    """A build's error in one line: its first line, and the compiler's first error when it quotes one."""
    lines = [line.strip() for line in error.splitlines() if line.strip() and not line.startswith("Full log:")]
    if not lines:
        return "the build failed"
    detail = next((line for line in lines[1:] if "error" in line.lower()), None)
    return f"{lines[0]} {detail}" if detail else lines[0]


class EngineBuildPanel(QWidget):
    """Offers to build `engine`; follows the service's build (started here or already running) from its
    `engine_build` events. Emits `sig_engine_built` once the build completed."""

    sig_engine_built = Signal(str)  # engine

    def __init__(self, connection: ServiceConnection, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._connection = connection
        self._call = LatestCall(connection, self)
        self._engine: str | None = None
        self._build_id: str | None = None  # the build this panel follows
        self._starting = False  # a start asked for and not answered yet: the build's events may come first
        self._ended_id: str | None = None  # the last build seen to end: a record saying it runs is older news
        self._built: str | None = None  # what the last build here made, said until the page starts over
        self.intro_label = QLabel()
        self.intro_label.setWordWrap(True)
        self.intro_label.setTextFormat(Qt.TextFormat.PlainText)
        self.intro_label.setAccessibleName("Missing engine")
        self.build_button = QPushButton()
        self.build_button.setAccessibleName("Build the missing engine")
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setAccessibleName("Cancel the engine build")
        self.progress_bar = QProgressBar()
        self.progress_bar.setRange(0, 100)
        self.progress_bar.setAccessibleName("Engine build progress")
        self.step_label = QLabel()
        self.step_label.setTextFormat(Qt.TextFormat.PlainText)
        self.step_label.setAccessibleName("Engine build step")
        self.error_label = error_label()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.intro_label)
        row = QHBoxLayout()
        row.addWidget(self.build_button)
        row.addWidget(self.progress_bar, 1)
        row.addWidget(self.cancel_button)
        layout.addLayout(row)
        layout.addWidget(self.step_label)
        layout.addWidget(self.error_label)
        self.build_button.clicked.connect(self._on_build_button_clicked)
        self.cancel_button.clicked.connect(self._on_cancel_button_clicked)
        connection.sig_engine_build_changed.connect(self._on_connection_engine_build_changed)
        self.hide()

    @property
    def building(self) -> bool:
        return self._build_id is not None

    def clear(self) -> None:
        """Start over (the page is shown anew): hidden, unless a build is going on."""
        self._built = None
        if not self.building:
            self.offer(None)

    def offer(self, engine: str | None) -> None:
        """Offer a build of `engine` (None: nothing to build), and pick up a build of it the service is already
        running. With nothing to build, the panel says what it just built, or hides."""
        if engine is None:
            self._engine = None
            self.setVisible(self._built is not None)
            self.intro_label.setText(f"{self._built}: the recommendation was made again with it.")
            for widget in (self.build_button, self.cancel_button, self.progress_bar, self.step_label):
                widget.hide()
            return
        self._engine = engine
        self.show()
        self.build_button.show()
        words = ENGINE_WORDS.get(engine, engine)
        self.intro_label.setText(f"{words} would serve this better, and it is not installed here.")
        self.build_button.setText(f"Build {engine}")
        self.build_button.setAccessibleName(f"Build {engine} on the service's machine")
        show_error(self.error_label, "")
        self._show_idle("")
        self._call.run(ControlClient.engine_builds, self._on_builds_loaded, lambda _message: None)

    def _on_builds_loaded(self, listing: EngineBuildListing) -> None:
        build = listing["build"]
        if build is not None and build["state"] == "running" and build["engine"] == self._engine:
            self._follow(build)

    @Slot()
    def _on_build_button_clicked(self) -> None:
        if self._engine is None:
            return
        self.build_button.setEnabled(False)
        self._starting = True
        show_error(self.error_label, "")
        self.step_label.setText("starting")
        self.step_label.show()
        job = functools.partial(ControlClient.start_engine_build, engine=self._engine)
        self._call.run(job, self._follow, self._on_build_failed)

    @Slot()
    def _on_cancel_button_clicked(self) -> None:
        if self._engine is None or self._build_id is None:
            return
        self.cancel_button.setEnabled(False)
        self.step_label.setText("cancelling")
        job = functools.partial(ControlClient.cancel_engine_build, engine=self._engine)
        self._call.run(job, self._show_build, self._on_build_failed)

    def _follow(self, build: EngineBuildRecord) -> None:
        self._starting = False
        if build["id"] == self._ended_id:  # it ended before this answer came (its end came on the event stream)
            return
        self._build_id = build["id"]
        self._show_build(build)

    @Slot(object)
    def _on_connection_engine_build_changed(self, build: EngineBuildRecord) -> None:
        if build["engine"] != self._engine:
            return
        adopt = build["state"] == "running" or self._starting  # started here, or elsewhere (another window)
        if self._build_id is None and adopt and build["id"] != self._ended_id:
            self._build_id = build["id"]
        if build["id"] == self._build_id:
            self._show_build(build)

    def _show_build(self, build: EngineBuildRecord) -> None:
        if build["id"] != self._build_id:
            return
        state = build["state"]
        if state == "running":
            self.build_button.setEnabled(False)
            self.progress_bar.setValue(build["percent"])
            self.progress_bar.show()
            self.cancel_button.show()
            self.step_label.setText(f"{build['step']} ({build['percent']} %)")
            self.step_label.show()
            return
        self._build_id, self._ended_id = None, build["id"]
        if state == "completed":
            self._built = f"Built {build['engine']} {build['version'] or ''}".rstrip()
            self._show_idle(self._built + ".")
            self.build_button.setEnabled(False)
            self.sig_engine_built.emit(build["engine"])
        elif state == "cancelled":
            self._show_idle("The build was cancelled.")
        else:
            self._show_idle("")
            error = build["error"] or "the build failed"
            show_error(self.error_label, f"The build failed: {one_line(error)}")
            self.error_label.setToolTip(error + (f"\nFull log: {build['log_path']}" if build["log_path"] else ""))

    def _on_build_failed(self, message: str) -> None:
        self._starting = False
        self._show_idle("")
        show_error(self.error_label, f"Could not build: {one_line(message)}")

    def _show_idle(self, step: str) -> None:
        self.build_button.setEnabled(True)
        self.cancel_button.setEnabled(True)
        self.progress_bar.hide()
        self.cancel_button.hide()
        self.step_label.setText(step)
        self.step_label.setVisible(bool(step))
