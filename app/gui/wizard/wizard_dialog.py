"""The setup wizard: this machine -> what the user wants to do -> which model -> how to run it, then launch.

Every answer comes from the service through the connection's pool threads; the wizard never blocks the GUI
thread and never imports the planner: the service plans, the wizard shows.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtWidgets import QPushButton, QWidget, QWizard

from app.gui.connection.service_connection import ServiceConnection
from app.gui.wizard.recommendation_page import RecommendationPage
from app.gui.wizard.wizard_pages import HardwarePage, ModelPage, UsePage, WizardChoices

MINIMUM_WIDTH, MINIMUM_HEIGHT = 680, 500


class SetupWizardDialog(QWizard):
    """Four steps to a launched model. Reusable: `restart()` before showing it again starts from step one."""

    sig_model_launched = Signal(str)  # model id, once ready

    def __init__(self, connection: ServiceConnection, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Set up a model")
        self.setObjectName("setup_wizard")
        # Opens roomy, and still fits a 1920x1080 screen at 200 % scaling (960x540 logical pixels).
        self.setMinimumSize(MINIMUM_WIDTH, MINIMUM_HEIGHT)
        self.resize(760, 620)
        self.setWizardStyle(QWizard.WizardStyle.ModernStyle)
        self.setTitleFormat(Qt.TextFormat.RichText)
        self.setSubTitleFormat(Qt.TextFormat.RichText)
        self.setButtonText(QWizard.WizardButton.FinishButton, "Done")
        for button, name in (
            (QWizard.WizardButton.BackButton, "Previous step"),
            (QWizard.WizardButton.NextButton, "Next step"),
            (QWizard.WizardButton.FinishButton, "Done: close the wizard"),
            (QWizard.WizardButton.CancelButton, "Cancel the wizard"),
            (QWizard.WizardButton.HelpButton, "Help"),
            (QWizard.WizardButton.CommitButton, "Commit"),
        ):
            self.button(button).setAccessibleName(name)
        self.choices = WizardChoices()
        self.hardware_page = HardwarePage(connection, self.choices)
        self.use_page = UsePage(self.choices)
        self.model_page = ModelPage(connection, self.choices)
        self.recommendation_page = RecommendationPage(connection, self.choices)
        pages = (self.hardware_page, self.use_page, self.model_page, self.recommendation_page)
        for number, page in enumerate(pages, start=1):
            page.setTitle(f"Step {number} of {len(pages)}: {page.title()}")
            self.addPage(page)
        self.recommendation_page.sig_model_launched.connect(self.sig_model_launched)
        self.finished.connect(self._on_self_finished)
        self.currentIdChanged.connect(self._on_self_current_id_changed)

    @Slot(int)
    def _on_self_current_id_changed(self, _page_id: int) -> None:
        # On the last step Enter launches: the wizard's own default button there (Done) launches nothing.
        last = self.currentPage() is self.recommendation_page
        self.setOption(QWizard.WizardOption.NoDefaultButton, last)
        finish = self.button(QWizard.WizardButton.FinishButton)
        if last and isinstance(finish, QPushButton):
            finish.setDefault(False)
        self.recommendation_page.launch_button.setDefault(last)

    @Slot(int)
    def _on_self_finished(self, _result: int) -> None:
        # Answers still on their way belong to a wizard the user has left: drop them.
        self.hardware_page.cancel()
        self.model_page.cancel()
        self.recommendation_page.cancel()
