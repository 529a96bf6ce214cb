"""Ready-to-paste client code for the selected model, and a "Test it" button that streams a short answer.

The code reads the key from $MODELDECK_API_KEY and says first how to set it; the key itself goes into the code
only when the user ticks "Include my API key" (code gets pasted into chats and repositories)."""

from __future__ import annotations

import json
import shlex
import time

from PySide6.QtCore import Signal, Slot
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QCheckBox,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from app.api_types import EndpointRecord, TlsRecord
from app.client import stream_chat
from app.gui.chat.answer_stream import ChatStreamThread, speed_text

TEST_PROMPT = "Say hello in five words."
TEST_MAX_TOKENS = 32
KEY_VARIABLE = "MODELDECK_API_KEY"  # snippets read the key from the environment, so it never sits on screen


def snippets(url: str, model_id: str, tls: TlsRecord | None = None) -> dict[str, str]:
    """curl, Python and JavaScript code that asks `model_id` at `url` (the /v1 base) for a chat completion.
    `tls` (the endpoint's "tls"): the code trusts that certificate file, and says its fingerprint."""
    if tls:
        return _tls_snippets(url, model_id, tls["cert_path"], tls["fingerprint_sha256"])
    return {
        "curl": (
            f"curl {url}/chat/completions \\\n"
            f'  -H "Authorization: Bearer ${KEY_VARIABLE}" -H "Content-Type: application/json" \\\n'
            f'  -d \'{{"model": "{model_id}", "messages": [{{"role": "user", "content": "Hello!"}}]}}\''
        ),
        "Python": (
            "import os\nfrom openai import OpenAI\n\n"
            f'client = OpenAI(base_url="{url}", api_key=os.environ["{KEY_VARIABLE}"])\n'
            "reply = client.chat.completions.create(\n"
            f'    model="{model_id}", messages=[{{"role": "user", "content": "Hello!"}}]\n'
            ")\nprint(reply.choices[0].message.content)"
        ),
        "JavaScript": (
            f'const response = await fetch("{url}/chat/completions", {{\n'
            '  method: "POST",\n'
            f'  headers: {{ "Authorization": `Bearer ${{process.env.{KEY_VARIABLE}}}`, '
            '"Content-Type": "application/json" },\n'
            f'  body: JSON.stringify({{ model: "{model_id}", messages: [{{ role: "user", content: "Hello!" }}] }}),\n'
            "});\nconsole.log((await response.json()).choices[0].message.content);"
        ),
    }


def _tls_snippets(url: str, model_id: str, cert_path: str, fingerprint: str) -> dict[str, str]:
    where = "on another machine, copy the file there and change the path"
    trust = f"Trusts the endpoint's certificate (SHA-256 {fingerprint}); {where}"
    body = f'{{"model": "{model_id}", "messages": [{{"role": "user", "content": "Hello!"}}]}}'
    return {
        "curl": (
            f"# {trust}\n"
            f"curl --cacert {shlex.quote(cert_path)} {url}/chat/completions \\\n"
            f'  -H "Authorization: Bearer ${KEY_VARIABLE}" -H "Content-Type: application/json" \\\n'
            f"  -d '{body}'"
        ),
        "Python": (
            "import os\nimport ssl\n\nimport httpx\nfrom openai import OpenAI\n\n"
            f"# {trust}\n"
            f"tls = ssl.create_default_context(cafile={json.dumps(cert_path)})\n"
            f'client = OpenAI(base_url="{url}", api_key=os.environ["{KEY_VARIABLE}"], '
            "http_client=httpx.Client(verify=tls))\n"
            "reply = client.chat.completions.create(\n"
            f'    model="{model_id}", messages=[{{"role": "user", "content": "Hello!"}}]\n'
            ")\nprint(reply.choices[0].message.content)"
        ),
        "JavaScript": (  # the plain code: Node takes the certificate from its environment
            f"// Run Node with NODE_EXTRA_CA_CERTS={shlex.quote(cert_path)} to trust the endpoint's certificate\n"
            f"// (SHA-256 {fingerprint}); {where}.\n" + snippets(url, model_id)["JavaScript"]
        ),
    }


def with_key(code: dict[str, str], key: str | None, include: bool) -> dict[str, str]:
    """The snippets with how to set the key on top: the shell line to run first, or (`include`) the key itself
    set where each language reads it. An endpoint without a key (`key` None) needs neither."""
    if not key:
        return code
    where = "the key is under Home > Endpoint"
    if include:
        private = "your key: keep this code private"
        shell = f"export {KEY_VARIABLE}={shlex.quote(key)}"
        python = f"os.environ[{json.dumps(KEY_VARIABLE)}] = {json.dumps(key)}  # {private}"
        js = f"process.env.{KEY_VARIABLE} = {json.dumps(key)}; // {private}"
    else:
        first = f"export {KEY_VARIABLE}='<your key>'"
        shell = f"# First set the key ({where}): {first}"
        python = f"# First, in the shell ({where}): {first}"
        js = f"// First, in the shell ({where}): {first}"
    out = dict(code)
    out["curl"] = f"{shell}\n{code['curl']}"
    python_code = code["Python"]
    out["Python"] = python_code.replace("import os\n", f"import os\n\n{python}\n", 1) if include else (
        f"{python}\n{python_code}")  # fmt: skip
    out["JavaScript"] = f"{js}\n{code['JavaScript']}"
    return out


class SnippetsPanel(QWidget):
    """Code for the selected model, one tab per language with a Copy button, and a live test of the endpoint."""

    sig_text_copied = Signal(str)  # what was copied, in words

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._endpoint: EndpointRecord | None = None
        self._model_id = ""
        self._thread: ChatStreamThread | None = None
        self._started = 0.0
        self._first_at: float | None = None
        self._chunks = 0
        self.code_tabs = QTabWidget()
        self.code_tabs.setAccessibleName("Code snippets")
        self.code_edits: dict[str, QPlainTextEdit] = {}
        for language in ("curl", "Python", "JavaScript"):
            edit = QPlainTextEdit()
            edit.setReadOnly(True)
            edit.setAccessibleName(f"{language} snippet")
            self.code_edits[language] = edit
            self.code_tabs.addTab(edit, language)
        self.include_key_check = QCheckBox("Include my API key")
        self.include_key_check.setAccessibleName("Include the API key in the code")
        self.include_key_check.setToolTip("Puts the key itself in the code; otherwise it says how to set it.")
        self.copy_button = QPushButton("Copy snippet")
        self.copy_button.setAccessibleName("Copy the shown snippet")
        self.test_button = QPushButton("Test it")
        self.test_button.setAccessibleName("Send a short prompt to the selected model")
        self.answer_label = QLabel()
        self.answer_label.setWordWrap(True)
        self.answer_label.setAccessibleName("Test answer")
        self.stats_label = QLabel()
        self.stats_label.setAccessibleName("Speed of the test answer")
        buttons = QHBoxLayout()
        buttons.addWidget(self.include_key_check)
        buttons.addWidget(self.copy_button)
        buttons.addWidget(self.test_button)
        buttons.addWidget(self.stats_label, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.code_tabs)
        layout.addLayout(buttons)
        layout.addWidget(self.answer_label)
        self.copy_button.clicked.connect(self._on_copy_button_clicked)
        self.include_key_check.toggled.connect(self._refresh)
        self.test_button.clicked.connect(self._on_test_button_clicked)
        self._refresh()

    @property
    def is_testing(self) -> bool:
        return self._thread is not None

    def set_endpoint(self, info: EndpointRecord) -> None:
        self._endpoint = info
        self._refresh()

    def set_model(self, model_id: str) -> None:
        self._model_id = model_id
        self._refresh()

    def wait_stopped(self, timeout_ms: int = 5000) -> bool:
        if self._thread is None:
            return True
        self._thread.stream.cancel()
        return self._thread.wait(timeout_ms)

    @Slot()
    def _refresh(self) -> None:
        ready = self._endpoint is not None and bool(self._model_id)
        if self._endpoint is not None and self._model_id:
            endpoint = self._endpoint
            code = snippets(str(endpoint["url"]), self._model_id, endpoint.get("tls"))
            key = endpoint.get("api_key")
            for language, text in with_key(code, key, self.include_key_check.isChecked()).items():
                self.code_edits[language].setPlainText(text)
        self.copy_button.setEnabled(ready)
        self.test_button.setEnabled(ready and self._thread is None)

    @Slot()
    def _on_copy_button_clicked(self) -> None:
        language = self.code_tabs.tabText(self.code_tabs.currentIndex())
        QGuiApplication.clipboard().setText(self.code_edits[language].toPlainText())
        self.sig_text_copied.emit(f"{language} snippet")

    @Slot()
    def _on_test_button_clicked(self) -> None:
        if self._endpoint is None or not self._model_id or self._thread is not None:
            return
        messages = [{"role": "user", "content": TEST_PROMPT}]
        thread = self._thread = ChatStreamThread(stream_chat(self._endpoint, self._model_id, messages, TEST_MAX_TOKENS))
        thread.setParent(self)
        thread.sig_delta_received.connect(self._on_thread_delta_received)
        thread.sig_stream_failed.connect(self._on_thread_stream_failed)
        thread.finished.connect(self._on_thread_finished)
        self._started, self._first_at, self._chunks = time.perf_counter(), None, 0
        self.answer_label.setText("")
        self.stats_label.setText("Waiting for the first token\N{HORIZONTAL ELLIPSIS}")
        self._refresh()
        thread.start()

    @Slot(str)
    def _on_thread_delta_received(self, delta: str) -> None:
        if self._first_at is None:
            self._first_at = time.perf_counter()
        self._chunks += 1
        self.answer_label.setText(self.answer_label.text() + delta)

    @Slot(str)
    def _on_thread_stream_failed(self, message: str) -> None:
        self.answer_label.setText(message)

    @Slot()
    def _on_thread_finished(self) -> None:
        thread, self._thread = self._thread, None
        self.stats_label.setText(speed_text(self._started, self._first_at, self._chunks, time.perf_counter()))
        self._refresh()
        if thread is not None:
            thread.deleteLater()
