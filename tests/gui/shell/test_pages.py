"""Every page of the window against the real service on the bundled model, at 100 % and at 200 % scaling: a PNG of
each (every tab, the setup wizard's steps, the chat page with an answer) under the test's temporary directory for
people to look at, an accessible name on every control, and no control squeezed below the size its text needs.

200 % runs this same test in a subprocess with QT_SCALE_FACTOR=2: Qt reads the factor once, when the
application starts, and pytest-qt's application lives for the whole session.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from PySide6.QtCore import QSize, Qt
from PySide6.QtWidgets import (
    QAbstractButton,
    QAbstractItemView,
    QAbstractSpinBox,
    QComboBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QScrollBar,
    QSpinBox,
    QTabBar,
    QTabWidget,
    QTextEdit,
    QToolBar,
    QWidget,
)
from pytestqt.qtbot import QtBot

from app.gui.shell.main_window import MainWindow
from app.hub.library import BUNDLED_ID
from tests.gui.wizard.test_setup_wizard import launch_in_view
from tests.support.service import REPO

ANSWER_TIMEOUT_MS = 60_000
SCALE_ENV = "QT_SCALE_FACTOR"
SUBPROCESS_TIMEOUT_S = 400
SMALL_SCREEN = QSize(960, 540)
CONTROL_TYPES = (
    QAbstractButton,
    QLineEdit,
    QComboBox,
    QAbstractSpinBox,
    QAbstractItemView,
    QPlainTextEdit,
    QTextEdit,
    QTabWidget,
)


def _is_qt_internal(widget: QWidget, root: QWidget) -> bool:
    """A part Qt builds inside a control (a spin box's line edit, a combo box's list, a table's corner button,
    a tab bar's scroll arrows): it is named through the control that owns it."""
    if widget.objectName().startswith("qt_") or isinstance(widget, QScrollBar | QTabBar):
        return True
    parent = widget.parentWidget()
    while parent is not None and parent is not root:
        if (isinstance(parent, CONTROL_TYPES) and not isinstance(parent, QTabWidget)) or isinstance(parent, QTabBar):
            return True
        parent = parent.parentWidget()
    return False


def controls(root: QWidget) -> list[QWidget]:
    """The interactive controls under `root` that a keyboard or screen-reader user meets."""
    return [
        widget
        for widget in root.findChildren(QWidget)
        if isinstance(widget, CONTROL_TYPES) and not _is_qt_internal(widget, root)
    ]


def _describe(widget: QWidget) -> str:
    text = widget.text() if isinstance(widget, QAbstractButton | QLineEdit) else ""
    return f"{type(widget).__name__}({widget.objectName() or text!r}) in {type(widget.parentWidget()).__name__}"


def unnamed_controls(root: QWidget) -> list[str]:
    return [_describe(w) for w in controls(root) if not w.accessibleName().strip()]


def _in_exclusive_group(button: QAbstractButton) -> bool:
    group = button.group()
    return group.exclusive() if group is not None else button.autoExclusive()


def keyboard_problems(root: QWidget) -> list[str]:
    """Controls the Tab key cannot reach, and views that keep the Tab key to themselves. Toolbar buttons are left
    out: Qt gives them no focus, and each of their actions is in a menu (Alt+letter)."""
    found = []
    for widget in controls(root):
        if isinstance(widget.parentWidget(), QToolBar):
            continue
        if isinstance(widget, QAbstractButton) and _in_exclusive_group(widget) and not widget.isChecked():
            continue  # Tab reaches a radio group at its checked button; the arrow keys move within the group
        if not widget.focusPolicy() & Qt.FocusPolicy.TabFocus:
            found.append(f"not reachable with Tab: {_describe(widget)}")
        if isinstance(widget, QAbstractItemView) and widget.tabKeyNavigation():
            found.append(f"keeps the Tab key: {_describe(widget)}")
    return found


def squeezed_widgets(root: QWidget) -> list[str]:
    """Visible labels and buttons given less room than their text needs (clipped), as descriptions."""
    found = []
    for widget in root.findChildren(QWidget):
        if not widget.isVisible() or _is_qt_internal(widget, root):
            continue
        one_line_label = isinstance(widget, QLabel) and not widget.wordWrap()
        if not (isinstance(widget, QAbstractButton) or one_line_label) or not widget.text():
            continue
        need = widget.minimumSizeHint()
        if widget.width() < need.width() or widget.height() < need.height():
            found.append(f"{_describe(widget)} {widget.width()}x{widget.height()} < {need.width()}x{need.height()}")
    return found


def scale_name() -> str:
    return f"{round(float(os.environ.get(SCALE_ENV, '1')) * 100)}"


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.replace("&", "").lower()).strip("-")


class Shots:
    """Writes numbered PNGs into one folder and checks each shown widget as it goes."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True)
        self.paths: list[Path] = []
        self.problems: dict[str, None] = {}  # ordered, each once: the same panel shows up on several pages

    def take(self, widget: QWidget, name: str) -> None:
        path = self.folder / f"{len(self.paths) + 1:02d}-{name}.png"
        pixmap = widget.grab()
        assert pixmap.save(str(path)), f"could not write {path}"
        self.paths.append(path)
        print(f"screenshot: {path} ({pixmap.width()}x{pixmap.height()} px)")
        self.problems.update(dict.fromkeys(f"unnamed {d}" for d in unnamed_controls(widget)))
        self.problems.update(dict.fromkeys(keyboard_problems(widget)))
        self.problems.update(dict.fromkeys(f"{name}: squeezed {d}" for d in squeezed_widgets(widget)))


def test_every_page_screenshot_names_and_room(qtbot: QtBot, main_window: MainWindow, tmp_path: Path) -> None:
    window, tabs = main_window, main_window.tabs
    shots = Shots(tmp_path / f"screenshots-{scale_name()}")
    models = window.item_model
    qtbot.waitUntil(lambda: models.state_of(BUNDLED_ID) == "stopped")
    home = window.home_page
    qtbot.waitUntil(lambda: "CPU" in home.hardware_label.text(), timeout=ANSWER_TIMEOUT_MS)
    qtbot.waitUntil(home.first_run_panel.start_button.isEnabled)
    shots.take(window, "home-first-run")

    # The chat page with an answer (the gateway starts the model for the first request).
    chat = window.chat_page
    tabs.setCurrentWidget(chat)
    qtbot.waitUntil(lambda: chat.picker.has_model(BUNDLED_ID) and chat.has_endpoint)
    chat.picker.select_model(BUNDLED_ID)
    chat.send("Say hello in one short sentence.")
    qtbot.waitUntil(lambda: not chat.is_streaming, timeout=ANSWER_TIMEOUT_MS)
    assert "TTFT" in chat.stats_label.text(), chat.transcript.plain_text()
    qtbot.waitUntil(lambda: models.state_of(BUNDLED_ID) == "ready", timeout=ANSWER_TIMEOUT_MS)
    window.model_list_panel.select_model(BUNDLED_ID)

    for index in range(tabs.count()):
        tabs.setCurrentIndex(index)
        qtbot.wait(300)  # let the page lay out and draw its first data
        shots.take(window, f"tab-{index + 1}-{_slug(tabs.tabText(index))}")
    assert not home.first_run_shown  # the model ran: Home is the everyday view now

    window.setup_action.trigger()
    wizard = window.setup_dialog
    assert wizard is not None
    qtbot.waitUntil(wizard.isVisible)
    for step in range(4):
        page = wizard.currentPage()
        qtbot.waitUntil(page.isComplete, timeout=ANSWER_TIMEOUT_MS)
        qtbot.wait(200)
        shots.take(wizard, f"wizard-{step + 1}-{_slug(page.title())}")
        if step < 3:
            wizard.next()
    # The last step, the fullest, at the smallest size the wizard allows: nothing may be cut there either.
    wizard.resize(wizard.minimumSize())
    qtbot.waitUntil(lambda: wizard.size() == wizard.minimumSize())
    qtbot.wait(200)
    shots.take(wizard, "wizard-4-smallest")
    # At the smallest size, and at 200 % in the subprocess run: Launch in view without scrolling, and default.
    launch_button = wizard.recommendation_page.launch_button
    assert launch_in_view(wizard, launch_button) and launch_button.isDefault()
    wizard.reject()

    # Everything fits a 1920x1080 screen at 200 % scaling, which is 960x540 logical pixels (offscreen reports a
    # screen of its own, so the bound is written here).
    tabs.setCurrentWidget(home)
    window.resize(window.minimumSizeHint())
    qtbot.wait(200)
    shots.take(window, "window-smallest")
    assert not home.side_by_side  # a narrow Home stacks the machine above the endpoint
    assert home.endpoint_panel.url_edit.width() >= home.endpoint_panel.url_edit.minimumWidth() > 100
    for widget in (window, wizard):
        smallest = widget.minimumSizeHint().expandedTo(widget.minimumSize())
        print(f"{type(widget).__name__} at {scale_name()} %: smallest {smallest.width()}x{smallest.height()}")
        assert smallest.width() <= SMALL_SCREEN.width() and smallest.height() <= SMALL_SCREEN.height()
    assert not shots.problems, "\n".join(shots.problems)
    assert len(shots.paths) == 1 + tabs.count() + 4 + 2


def test_every_page_at_200_percent(tmp_path: Path) -> None:
    """The test above in a fresh interpreter whose Qt scales everything by two."""
    env = {**os.environ, SCALE_ENV: "2"}
    env.pop("MODELDECK_HOME", None)  # the inner test sets its own
    basetemp = tmp_path / "scaled"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", f"{Path(__file__)}::test_every_page_screenshot_names_and_room",
         "-q", "-s", "-p", "no:cacheprovider", f"--basetemp={basetemp}"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S,
    )  # fmt: skip
    print(result.stdout[-6000:])
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    shots = sorted(basetemp.rglob("screenshots-200/*.png"))
    assert len(shots) >= 11
    first = shots[0]
    size = _png_size(first)
    assert size.width() >= 2 * 1000 and size.height() >= 2 * 600, f"{first} is {size}: not scaled"


def _png_size(path: Path) -> QSize:
    header = path.read_bytes()[:24]  # PNG: the IHDR chunk's width and height, big-endian, at bytes 16-24
    return QSize(int.from_bytes(header[16:20], "big"), int.from_bytes(header[20:24], "big"))


def test_the_walk_sees_what_it_should(qtbot: QtBot) -> None:
    """The walk finds an unnamed button and a clipped label, and leaves Qt's own parts of a control alone."""
    root = QWidget()
    qtbot.addWidget(root)
    layout = QHBoxLayout(root)
    named, unnamed, spin = QPushButton("Named"), QPushButton("Unnamed"), QSpinBox()
    named.setAccessibleName("A named button")
    spin.setAccessibleName("A number")
    label = QLabel("a label with a long text that cannot fit")
    label.setFixedWidth(30)
    for widget in (named, unnamed, spin, label):
        layout.addWidget(widget)
    root.show()
    assert [type(w).__name__ for w in controls(root)] == ["QPushButton", "QPushButton", "QSpinBox"]
    assert unnamed_controls(root) == ["QPushButton('Unnamed') in QWidget"]
    assert len(squeezed_widgets(root)) == 1 and "QLabel" in squeezed_widgets(root)[0]
    assert keyboard_problems(root) == []
    unnamed.setFocusPolicy(Qt.FocusPolicy.ClickFocus)
    assert keyboard_problems(root) == ["not reachable with Tab: QPushButton('Unnamed') in QWidget"]
