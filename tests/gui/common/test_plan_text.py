"""The wizard's words and memory bars for machines we do not have (recorded profiles) and plans that use a GPU."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pytestqt.qtbot import QtBot

from app.gui.common.plan_text import hardware_rows, memory_text, problems_html, rows_html, speed_text
from app.gui.wizard.memory_bar import MemoryBarPanel, memory_bars

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "hardware"
GIB = 1 << 30


def _profile(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / name).read_text(encoding="utf-8"))
    return data


def _memory(ram: dict[str, int], vram: dict[str, int], gpus: int = 1) -> dict[str, Any]:
    names = ("weights", "kv_cache", "compute", "workspace", "runtime")
    parts = [{"name": n, "ram": ram.get(n, 0), "vram": vram.get(n, 0)} for n in names]
    return {"parts": parts, "ram": sum(ram.values()), "vram_per_gpu": sum(vram.values()), "gpus": gpus}


def test_gpus_show_free_of_total_memory() -> None:
    rows = dict(hardware_rows(_profile("a100_80gb_x2.json")))
    assert "free of" in rows["GPU 0"] and "free of" in rows["GPU 1"]
    assert "compute capability 8.0" in rows["GPU 0"]
    assert rows["Driver"].startswith("NVIDIA ")
    apple = dict(hardware_rows(_profile("m2max_32gb.json")))
    assert "unified memory" in apple["GPU 0"]
    laptop = dict(hardware_rows(_profile("laptop_8core_16gb.json")))
    assert laptop["GPU"] == "none found: models run on the CPU"


def test_problems_come_with_their_advice_and_markup_is_escaped() -> None:
    problem = {"backend": "nvidia", "problem": "Driver <b>mismatch</b>", "advice": "Reboot & retry"}
    profile = {"gpu_problems": [{**problem, "severity": "problem"}]}
    html = problems_html(profile)
    assert "Problem (nvidia)" in html
    assert "Driver &lt;b&gt;mismatch&lt;/b&gt;" in html
    assert "Reboot &amp; retry" in html
    assert "&lt;GPU&gt;" in rows_html([("GPU 0", "<GPU>")])


def test_a_cpu_plan_has_one_bar_against_free_ram(qtbot: QtBot) -> None:
    memory = _memory(
        {"weights": 2 * GIB, "kv_cache": GIB, "compute": GIB // 4, "workspace": GIB // 4, "runtime": GIB // 2}, {}
    )
    bars = memory_bars(memory, {"ram": 10 * GIB}, unified=False)
    assert len(bars) == 1
    (bar,) = bars
    assert [s.size for s in bar.segments] == [2 * GIB, GIB, GIB]
    assert bar.used == 4 * GIB and bar.budget == 10 * GIB and bar.fits
    assert memory_text(memory) == "4.0 GiB RAM"
    panel = MemoryBarPanel()
    qtbot.addWidget(panel)
    panel.show_bar(bar)
    panel.show()
    assert "4.0 GiB at most (a prompt that fills the context), 10.0 GiB free" in panel.legend_label.text()
    assert panel.strip.accessibleDescription().endswith("fits")
    assert not panel.grab().isNull()


def test_a_gpu_plan_adds_a_gpu_bar_that_can_run_past_the_budget(qtbot: QtBot) -> None:
    memory = _memory(
        {"weights": GIB // 4, "compute": GIB // 4, "runtime": GIB // 2},
        {"weights": 20 * GIB, "kv_cache": 4 * GIB, "compute": GIB, "runtime": GIB},
        gpus=2,
    )
    ram_bar, gpu_bar = memory_bars(memory, {"ram": 30 * GIB, "gpu0": 22 * GIB, "gpu1": 22 * GIB}, unified=False)
    assert ram_bar.used == GIB
    assert gpu_bar.title == "GPU memory (per GPU)"
    assert gpu_bar.used == 26 * GIB and gpu_bar.fits is False
    assert "does not fit" in gpu_bar.summary()
    assert memory_text(memory) == "1.0 GiB RAM + 26.0 GiB GPU per GPU"
    panel = MemoryBarPanel()
    qtbot.addWidget(panel)
    panel.show_bar(gpu_bar)
    panel.show()
    assert "does not fit" in panel.legend_label.text()
    assert not panel.grab().isNull()  # paints the red mark at the budget without complaint


def test_unified_memory_is_one_pool() -> None:
    memory = _memory({"runtime": GIB}, {"weights": 8 * GIB, "kv_cache": 2 * GIB, "runtime": GIB // 2})
    (bar,) = memory_bars(memory, {"ram": 20 * GIB, "gpu0": 0}, unified=True)
    assert bar.title == "Unified memory"
    assert [s.size for s in bar.segments] == [8 * GIB, 2 * GIB, GIB + GIB // 2]
    assert bar.budget == 20 * GIB


def test_speed_in_words() -> None:
    assert speed_text(None).startswith("unknown")
    assert speed_text(41.6) == "about 42 tokens/s for one stream"
