"""Calibration on a real launch of the bundled model: predicted against measured memory, recorded and learned from."""

from __future__ import annotations

import re
from pathlib import Path

from app.hub.library import BUNDLED_ID
from app.paths import AppPaths
from app.planner.calibration import CalibrationStore
from app.planner.defaults import DEFAULT_CONTEXT
from app.planner.facts import facts_from_gguf
from app.planner.memory import llama_cpp_memory
from engines.gguf import read_gguf_info
from tests.support.service import RunningService
from tests.support.waiting import wait_for

MIB = 2**20


def wait_for_memory(service: RunningService, key: str) -> dict[str, object]:
    """The model listing's memory check once it has `key` filled."""

    def filled() -> dict[str, object] | None:
        memory = service.model()["memory"]
        return memory if isinstance(memory, dict) and memory[key] is not None else None

    memory: dict[str, object] = wait_for(filled, 30, f"the model's {key}", 0.1)
    return memory


def buffer_size(lines: list[str], name: str) -> int:
    """A buffer size from llama.cpp's load log, e.g. 'llama_kv_cache: CPU KV buffer size = 90.00 MiB'."""
    pattern = re.compile(rf"{name} buffer size =\s+([0-9.]+) MiB")
    sizes = [float(m.group(1)) for line in lines if (m := pattern.search(line))]
    assert sizes, f"no '{name} buffer size' line in the engine log"
    return round(sizes[-1] * MIB)


def test_buffers_predicted_match_what_llama_cpp_allocates(service: RunningService, bundled_gguf: Path) -> None:
    predicted = llama_cpp_memory(facts_from_gguf(read_gguf_info(bundled_gguf)), DEFAULT_CONTEXT)
    lines = service.client.logs(BUNDLED_ID, tail=2000)
    assert predicted.part("kv_cache").ram == buffer_size(lines, "CPU KV")
    output, compute = buffer_size(lines, "CPU  output"), buffer_size(lines, "CPU compute")
    assert predicted.part("workspace").ram > 0  # ggml's work buffer, which the log does not print
    # llama.cpp prints sizes rounded to 0.01 MiB
    assert abs(predicted.part("compute").ram - (output + compute)) < 0.01 * (output + compute)


def test_launch_is_measured_recorded_and_corrects_the_next_prediction(service: RunningService, paths: AppPaths) -> None:
    at_load = wait_for_memory(service, "measured_at_load_bytes")
    assert isinstance(at_load["measured_at_load_bytes"], int) and at_load["measured_at_load_bytes"] > 100 * MIB
    assert isinstance(at_load["error_at_load"], float)
    client = service.openai_client()
    answer = client.chat.completions.create(
        model=BUNDLED_ID, messages=[{"role": "user", "content": "Say hello."}], max_tokens=8
    )
    assert answer.choices[0].message.content
    after = wait_for_memory(service, "measured_after_request_bytes")
    assert after["within_peak"] is True  # a short request touches less than a prompt filling the context

    store = CalibrationStore(paths.calibration_db)
    rows = store.recent("llama-cpp-python", "llama")
    assert [row.phase for row in rows] == ["first_request", "ready"]
    assert rows[1].context == DEFAULT_CONTEXT and rows[1].measured_ram == at_load["measured_at_load_bytes"]
    assert rows[0].measured_ram == after["measured_after_request_bytes"]
    correction = store.correction("llama-cpp-python", "llama")
    assert correction.samples == 1 and correction.ram == rows[1].measured_ram - rows[1].predicted_ram

    # The next launch of the same engine and architecture is predicted with what this one measured at load.
    service.client.stop_model(BUNDLED_ID)
    service.client.start_model(BUNDLED_ID, wait=True)
    relaunched = wait_for_memory(service, "measured_at_load_bytes")
    assert relaunched["predicted_at_load_bytes"] == rows[1].measured_ram
