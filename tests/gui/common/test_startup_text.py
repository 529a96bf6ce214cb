"""The model list's memory tooltip with what a vLLM engine said while starting, as the service lists it (the
record is the shape `GET /api/models` answers; no vLLM runs here)."""

from __future__ import annotations

from PySide6.QtCore import Qt

from app.gui.common.model_item_model import MEMORY_COLUMN, ModelItemModel, startup_text

RECORD = {
    "id": "qwen-7b", "name": "Qwen 7B", "path": "/models/qwen", "state": "ready", "message": "ready",
    "size_bytes": 0, "rss_bytes": 2 << 30, "memory": None, "engine": "vllm",
    "startup": {
        "kv_cache_tokens": 1982448,
        "summary": ["KV cache: 1,982,448 tokens", "up to 242.00 requests of 8,192 tokens at once"],
    },
}  # fmt: skip


def test_startup_facts_in_the_memory_tooltip() -> None:
    models = ModelItemModel()
    models.set_models([RECORD, {**RECORD, "id": "small", "startup": None}])
    tooltip = str(models.data(models.index(0, MEMORY_COLUMN), Qt.ItemDataRole.ToolTipRole))
    assert tooltip == "Engine start-up: KV cache: 1,982,448 tokens; up to 242.00 requests of 8,192 tokens at once."
    other = models.data(models.index(1, MEMORY_COLUMN), Qt.ItemDataRole.ToolTipRole)
    assert other == "Resident memory of the engine process"
    assert startup_text({"summary": []}) is None
