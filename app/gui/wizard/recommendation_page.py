"""The setup wizard's last step: how the service would run the model, why, what it costs in memory, the
alternatives, and a Launch button that starts it with exactly those parameters."""

from __future__ import annotations

import functools
from html import escape

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFrame,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QScrollArea,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
    QWizardPage,
)

from app.api_types import (
    ACTIVE,
    EngineEvent,
    EngineFitRecord,
    ModelRecord,
    ModelState,
    OptionRecord,
    RecommendationRecord,
)
from app.client import ControlClient
from app.gui.common.hub_format import error_label, show_error
from app.gui.common.plan_text import (
    ENGINE_COLUMN_TIPS,
    ENGINE_COLUMNS,
    ENGINE_WORDS,
    USE_WORDS,
    engine_cells,
    headline,
    memory_text,
    plan_rows,
    reasons_html,
    rows_html,
)
from app.gui.common.quality_format import loss_text
from app.gui.connection.latest_call import LatestCall
from app.gui.connection.service_connection import ServiceConnection
from app.gui.wizard.engine_build_panel import EngineBuildPanel, engine_to_build
from app.gui.wizard.measured_speed import MeasuredSpeed, measured_speed, speed_words
from app.gui.wizard.memory_bar import MemoryBarPanel, memory_bars
from app.gui.wizard.wizard_pages import WizardChoices

OVERRIDE_KEYS = ("context", "gpu_layers", "threads", "batch", "parallel")
# Engines a start may name (the service's overrides); the default engine of a model is not named.
NAMED_ENGINES = ("llama-server",)
ALTERNATIVE_COLUMNS = ("Variant", "Engine", "Memory", "Max context", "Speed", "Fits", "Expected quality loss")
MAX_BARS = 2


def launch_overrides(option: OptionRecord) -> dict[str, int | str]:
    """The launch parameters of a recommended option, under the names the service takes them."""
    parameters = option["parameters"]
    overrides: dict[str, int | str] = {
        key: int(parameters[key]) for key in OVERRIDE_KEYS if parameters.get(key) is not None
    }
    if option.get("engine") in NAMED_ENGINES:
        overrides["engine"] = option["engine"]
    return overrides


def runs_otherwise(record: ModelRecord, overrides: dict[str, int | str]) -> bool:
    """True when the model's engine is running with other parameters (or another engine) than these."""
    plan = {**(record.get("plan") or {}), "engine": record.get("engine")}
    return record["state"] in ACTIVE and any(plan.get(k) != v for k, v in overrides.items())


def launch(client: ControlClient, model_id: str, overrides: dict[str, int | str]) -> ModelRecord:
    """Save these parameters as the model's load settings, for every later start, and start it with them. The
    service never restarts a running engine for new parameters, so one running with others is stopped first: the
    user asked for these by pressing Launch."""
    if overrides:  # a folder model's vLLM plan takes none
        client.save_model_settings(model_id, overrides)
    record = next((m for m in client.models() if m["id"] == model_id), None)
    if record is not None and runs_otherwise(record, overrides):
        client.stop_model(model_id)
    return client.start_model(model_id, overrides=overrides)


class RecommendationPage(QWizardPage):
    """Step 4. Emits `sig_model_launched` once the launched model is ready."""

    sig_model_launched = Signal(str)  # model id

    def __init__(self, connection: ServiceConnection, choices: WizardChoices, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setTitle("How to run it")
        self._choices = choices
        self._recommend_call = LatestCall(connection, self)
        self._launch_call = LatestCall(connection, self)
        self._speed_call = LatestCall(connection, self)
        self._measured: MeasuredSpeed | None = None
        self._best: OptionRecord | None = None
        self._launching: str | None = None  # model id of a launch not yet ready or failed
        self._seen_starting = False
        self.headline_label = QLabel()
        self.headline_label.setWordWrap(True)
        self.headline_label.setAccessibleName("Recommendation")
        self.headline_label.setTextFormat(Qt.TextFormat.RichText)
        self.plan_label = QLabel()
        self.plan_label.setAccessibleName("Recommended plan")
        self.reasons_label = QLabel()
        self.reasons_label.setWordWrap(True)
        self.reasons_label.setAccessibleName("Reasons")
        self.problems_label = QLabel()
        self.problems_label.setWordWrap(True)
        self.problems_label.setAccessibleName("Problems")
        self.problems_label.setTextFormat(Qt.TextFormat.PlainText)
        self.memory_bar_panels = [MemoryBarPanel() for _ in range(MAX_BARS)]
        self.engine_build_panel = EngineBuildPanel(connection)
        self.alternatives_table = QTableWidget(0, len(ALTERNATIVE_COLUMNS))
        self.alternatives_table.setHorizontalHeaderLabels(list(ALTERNATIVE_COLUMNS))
        self.alternatives_table.setAccessibleName("Alternatives")
        self.alternatives_table.setTabKeyNavigation(False)
        self.alternatives_table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.alternatives_table.verticalHeader().hide()
        self.alternatives_table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.alternatives_label = QLabel("Alternatives")
        self.engines_label = QLabel("Engines, scored 0-5 for this model on this machine (operations: 5 is simplest)")
        self.engines_table = QTableWidget(0, len(ENGINE_COLUMNS))
        self.engines_table.setHorizontalHeaderLabels(list(ENGINE_COLUMNS))
        for column, tip in enumerate(ENGINE_COLUMN_TIPS):
            header_item = self.engines_table.horizontalHeaderItem(column)
            if header_item is not None:
                header_item.setToolTip(tip)
        self.engines_table.setAccessibleName("Engines")
        self.engines_table.setTabKeyNavigation(False)
        self.engines_table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.engines_table.verticalHeader().hide()
        self.engines_table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.launch_button = QPushButton("Launch")
        self.launch_button.setAccessibleName("Launch the model with these settings")
        self.launch_status_label = QLabel()
        self.launch_status_label.setWordWrap(True)
        self.launch_status_label.setAccessibleName("Launch status")
        self.launch_status_label.setTextFormat(Qt.TextFormat.PlainText)
        self.error_label = error_label()
        self._build_layout()
        self.launch_button.clicked.connect(self._on_launch_button_clicked)
        self.engine_build_panel.sig_engine_built.connect(self._on_engine_build_panel_engine_built)
        connection.sig_engine_changed.connect(self._on_connection_engine_changed)

    def _build_layout(self) -> None:
        # The page scrolls rather than squeezing its texts in a small wizard (or at 200 %); Launch stays below
        # the scrolled part, always in view.
        content = QWidget()
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        scroll.setWidget(content)
        page_layout = QVBoxLayout(self)
        page_layout.addWidget(scroll, 1)
        layout = QVBoxLayout(content)
        layout.addWidget(self.headline_label)
        layout.addWidget(self.plan_label)
        layout.addWidget(self.reasons_label)
        for panel in self.memory_bar_panels:
            layout.addWidget(panel)
        layout.addWidget(self.problems_label)
        layout.addWidget(self.engine_build_panel)
        layout.addWidget(self.alternatives_label)
        layout.addWidget(self.alternatives_table, 1)
        layout.addWidget(self.engines_label)
        layout.addWidget(self.engines_table, 1)
        layout.addStretch(0)
        launch_row = QHBoxLayout()
        launch_row.addWidget(self.launch_button)
        launch_row.addWidget(self.launch_status_label, 1)
        page_layout.addLayout(launch_row)
        page_layout.addWidget(self.error_label)

    @property
    def best(self) -> OptionRecord | None:
        return self._best

    def cancel(self) -> None:
        # A build going on is left to finish: it is the service's, and the next recommendation uses it.
        self._recommend_call.cancel()
        self._launch_call.cancel()
        self._speed_call.cancel()
        self._launching = None

    # Recommendation ----------------------------------------------------------------------------------

    def initializePage(self) -> None:
        model = self._choices.model
        assert model is not None, "the model page does not let the wizard go on without a model"
        self._best, self._launching, self._measured = None, None, None
        self._launch_call.cancel()
        use = USE_WORDS.get(self._choices.use, self._choices.use)
        self.setSubTitle(f"How to run {escape(model['name'])} for {use}.")
        self.headline_label.setText(f"Working out how to run {escape(model['name'])}\N{HORIZONTAL ELLIPSIS}")
        for widget in (self.plan_label, self.reasons_label, self.problems_label, *self.memory_bar_panels):
            widget.hide()
        self.alternatives_table.setRowCount(0)
        self.engines_table.setRowCount(0)
        self.launch_button.setText("Launch")
        self.engine_build_panel.clear()
        self._ask_recommendation()

    def _ask_recommendation(self) -> None:
        model = self._choices.model
        if model is None:
            return
        self.launch_button.setEnabled(False)
        self.launch_status_label.setText("")
        show_error(self.error_label, "")
        job = functools.partial(
            ControlClient.recommend, model_id=model["id"], use=self._choices.use, users=self._choices.users
        )
        self._recommend_call.run(job, self._on_recommendation_loaded, self._on_recommendation_failed)

    def _on_recommendation_loaded(self, result: RecommendationRecord) -> None:
        best = self._best = result.get("best")
        problems = [str(p) for p in result.get("problems", [])]
        self.problems_label.setText("\n".join(problems))
        self.problems_label.setVisible(bool(problems))
        self._show_alternatives(result.get("alternatives", []))
        self._show_engines(result.get("engines", []))
        if not self.engine_build_panel.building:  # a build going on stays in view until it ends
            self.engine_build_panel.offer(engine_to_build(result))
        if best is None:
            self.headline_label.setText("<b>Nothing fits in this machine's free memory.</b>")
            return
        self.headline_label.setText(f"<b>{escape(headline(best))}</b>")
        self._show_plan()
        model_id = self._choices.model["id"] if self._choices.model else ""
        self._speed_call.run(
            functools.partial(measured_speed, model_id=model_id), self._on_speed_measured, lambda _message: None
        )  # without a measurement the estimate stands, and says it is one
        self.reasons_label.setText("<b>Why</b>" + reasons_html([str(r) for r in best.get("reasons", [])]))
        unified = bool(self._choices.hardware and self._choices.hardware["unified_memory"])
        bars = memory_bars(best["memory"], result.get("budgets", {}), unified)
        for panel, bar in zip(self.memory_bar_panels, bars, strict=False):
            panel.show_bar(bar)
        for index, panel in enumerate(self.memory_bar_panels):
            panel.setVisible(index < len(bars))
        for widget in (self.plan_label, self.reasons_label):
            widget.show()
        self._offer_launch(best)

    def _show_plan(self) -> None:
        best = self._best
        if best is None:
            return
        speed = speed_words(best.get("decode_tokens_per_s"), self._measured)
        rows = [(label, speed if label == "Speed" else text) for label, text in plan_rows(best)]
        self.plan_label.setText(rows_html(rows))

    def _on_speed_measured(self, measured: MeasuredSpeed | None) -> None:
        self._measured = measured
        self._show_plan()

    @property
    def measured(self) -> MeasuredSpeed | None:
        return self._measured

    def _offer_launch(self, best: OptionRecord) -> None:
        model = self._choices.model
        # An engine the service may be told to use (launch_overrides names it) launches whatever the model's default.
        if model is None or (best["engine"] != model["engine"] and best["engine"] not in NAMED_ENGINES):
            engine = ENGINE_WORDS.get(best["engine"], best["engine"])
            self.launch_status_label.setText(f"ModelDeck cannot launch {engine} plans for this model yet.")
            return
        self.launch_button.setEnabled(True)
        if runs_otherwise(model, launch_overrides(best)):
            self.launch_status_label.setText(f"{model['id']} is running with other settings: Launch restarts it.")

    def _on_recommendation_failed(self, message: str) -> None:
        self.headline_label.setText("")
        show_error(self.error_label, f"Could not work out a recommendation: {message}")

    def _show_alternatives(self, options: list[OptionRecord]) -> None:
        self.alternatives_label.setText("Alternatives" if options else "Alternatives: none for this model here.")
        self.alternatives_table.setVisible(bool(options))
        self.alternatives_table.setRowCount(len(options))
        for row, option in enumerate(options):
            speed = option.get("decode_tokens_per_s")
            cells = (
                str(option["variant"]),
                ENGINE_WORDS.get(option["engine"], option["engine"]),
                memory_text(option["memory"]),
                str(option["max_context"]),
                f"{speed:.0f} tokens/s" if speed is not None else "unknown",
                "yes" if option["fits"] else "no",
                loss_text(option.get("quality_loss")),
            )
            for column, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setToolTip("\n".join(str(r) for r in option.get("reasons", [])))
                self.alternatives_table.setItem(row, column, item)

    def _show_engines(self, fits: list[EngineFitRecord]) -> None:
        self.engines_label.setVisible(bool(fits))
        self.engines_table.setVisible(bool(fits))
        self.engines_table.setRowCount(len(fits))
        for row, fit in enumerate(fits):
            for column, text in enumerate(engine_cells(fit)):
                item = QTableWidgetItem(text)
                item.setToolTip(text if column == len(ENGINE_COLUMNS) - 1 else ", ".join(fit.get("features", ())))
                self.engines_table.setItem(row, column, item)

    @Slot(str)
    def _on_engine_build_panel_engine_built(self, _engine: str) -> None:
        """The engine was built: plan again, so that Launch uses it."""
        self._ask_recommendation()

    # Launch ------------------------------------------------------------------------------------------

    @Slot()
    def _on_launch_button_clicked(self) -> None:
        model, best = self._choices.model, self._best
        if model is None or best is None:
            return
        self._launching, self._seen_starting = model["id"], False
        self.launch_button.setEnabled(False)
        show_error(self.error_label, "")
        self.launch_status_label.setText(f"Launching {model['id']}\N{HORIZONTAL ELLIPSIS}")
        job = functools.partial(launch, model_id=model["id"], overrides=launch_overrides(best))
        self._launch_call.run(job, self._on_launch_answered, self._on_launch_failed)

    def _on_launch_answered(self, record: ModelRecord) -> None:
        state = record["state"]
        if state == ModelState.READY:  # it already ran with these parameters
            self._launch_ended(ready=True, message="")
        elif state in ACTIVE:
            self._seen_starting = True

    def _on_launch_failed(self, message: str) -> None:
        self._launch_ended(ready=False, message=message)

    @Slot(object)
    def _on_connection_engine_changed(self, event: EngineEvent) -> None:
        if self._launching is None or event["model_id"] != self._launching:
            return
        state = event["state"]
        if state == ModelState.STARTING:
            self._seen_starting = True
            self.launch_status_label.setText(f"Starting {self._launching}: loading the model\N{HORIZONTAL ELLIPSIS}")
        elif state == ModelState.READY and self._seen_starting:
            self._launch_ended(ready=True, message="")
        elif state == ModelState.FAILED:
            self._launch_ended(ready=False, message=str(event.get("message") or "no reason given"))

    def _launch_ended(self, ready: bool, message: str) -> None:
        model_id = self._launching
        if model_id is None:
            return
        self._launching = None
        if ready:
            context = self._best["context"] if self._best else "?"
            self.launch_status_label.setText(f"Ready: {model_id} is serving with a context of {context} tokens.")
            self.launch_button.setText("Launched")
            self.sig_model_launched.emit(model_id)
            return
        self.launch_status_label.setText("")
        self.launch_button.setEnabled(True)
        show_error(self.error_label, f"{model_id} did not start: {message}")
