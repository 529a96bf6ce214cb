"""The service's hardware profiles and recommendations (plain JSON) in words for the setup wizard.

Every value that came from the machine or a model file is escaped before it goes into rich text.
"""

from __future__ import annotations

from html import escape
from typing import Any

from app.api_types import CPURecord, EngineFitRecord, GPURecord, HardwareRecord, OptionRecord
from app.byte_size import format_bytes
from app.gui.common.quality_format import loss_text

TIER_WORDS = {
    "gpu": "all on the GPU",
    "partial": "split between the GPU and the CPU",
    "cpu": "on the CPU",
}
ENGINE_WORDS = {"llama-cpp-python": "llama.cpp", "vllm": "vLLM"}
USE_WORDS = {"chat": "chat", "serve": "serving an app", "long-context": "long documents"}


def cpu_text(cpu: CPURecord) -> str:
    cores = f"{cpu['physical_cores']} physical / " if cpu.get("physical_cores") else ""
    return f"{cpu.get('model') or 'unknown model'} ({cpu['architecture']}), {cores}{cpu['logical_cores']} logical cores"


def gpu_text(gpu: GPURecord, unified: bool) -> str:
    total = int(gpu["memory_total"])
    if gpu.get("memory_free") is not None:
        memory = f"{format_bytes(gpu['memory_free'])} free of {format_bytes(total)}"
    else:
        memory = f"{format_bytes(total)} {'unified memory' if unified else 'memory'}"
    details = [memory]
    if capability := gpu.get("compute_capability"):
        details.append("compute capability {}.{}".format(*capability))
    if gpu.get("mig_enabled"):
        details.append("MIG mode on: vLLM cannot use it whole")
    return f"{gpu['name']}: {', '.join(details)}"


def hardware_rows(profile: HardwareRecord) -> list[tuple[str, str]]:
    """(label, text) rows: CPU, RAM, each GPU, driver, disk."""
    unified = bool(profile.get("unified_memory"))
    rows = [
        ("CPU", cpu_text(profile["cpu"])),
        ("RAM", f"{format_bytes(profile['ram_available'])} available of {format_bytes(profile['ram_total'])}"),
    ]
    rows += [(f"GPU {gpu['index']}", gpu_text(gpu, unified)) for gpu in profile.get("gpus", [])]
    if not profile.get("gpus"):
        rows.append(("GPU", "none found: models run on the CPU"))
    if profile.get("driver_version"):
        cuda = f", CUDA {profile['cuda_version']}" if profile.get("cuda_version") else ""
        rows.append(("Driver", f"NVIDIA {profile['driver_version']}{cuda}"))
    if profile.get("disk_free") is not None:
        rows.append(("Disk", f"{format_bytes(profile['disk_free'])} free for models"))
    return rows


def rows_html(rows: list[tuple[str, str]]) -> str:
    cells = "".join(
        f"<tr><td><b>{escape(label)}</b></td><td style='padding-left:12px'>{escape(text)}</td></tr>"
        for label, text in rows
    )
    return f"<table>{cells}</table>"


def problems_html(profile: HardwareRecord, severity: str | None = None) -> str:
    """GPU problems and notes, each with its advice (only those of `severity` if given); empty when none."""
    items = []
    for problem in profile.get("gpu_problems", []):
        if severity is not None and problem.get("severity", "problem") != severity:
            continue
        kind = "Note" if problem.get("severity") == "note" else "Problem"
        colour = "#555555" if kind == "Note" else "#c0392b"
        items.append(
            f"<p><b style='color:{colour}'>{kind} ({escape(problem['backend'])}):</b> {escape(problem['problem'])}"
            f"<br>{escape(problem['advice'])}</p>"
        )
    return "".join(items)


def speed_text(tokens_per_s: float | None) -> str:
    if tokens_per_s is None:
        return "unknown (no memory bandwidth figure for this machine)"
    return f"about {tokens_per_s:.0f} tokens/s for one stream"


def memory_text(memory: dict[str, Any]) -> str:
    ram, vram = int(memory["ram"]), int(memory.get("vram_per_gpu") or 0)
    if not vram:
        return f"{format_bytes(ram)} RAM"
    gpus = int(memory.get("gpus") or 1)
    per_gpu = " per GPU" if gpus > 1 else ""
    return f"{format_bytes(ram)} RAM + {format_bytes(vram)} GPU{per_gpu}"


def headline(option: OptionRecord) -> str:
    engine = ENGINE_WORDS.get(option["engine"], option["engine"])
    tier = TIER_WORDS.get(option["tier"], option["tier"])
    return f"{engine} with {option['variant']}, {tier}"


def plan_rows(option: OptionRecord) -> list[tuple[str, str]]:
    """The recommendation's main figures."""
    return [
        ("Engine", ENGINE_WORDS.get(option["engine"], option["engine"])),
        ("Variant", str(option["variant"])),
        ("Runs", TIER_WORDS.get(option["tier"], option["tier"])),
        ("Context", f"{option['context']} tokens (at most {option['max_context']} fit)"),
        ("Speed", speed_text(option.get("decode_tokens_per_s"))),
        ("Memory", memory_text(option["memory"])),
        ("Expected quality loss", loss_text(option.get("quality_loss"))),
    ]


def reasons_html(reasons: list[str]) -> str:
    return "<ul style='margin-left:-20px'>" + "".join(f"<li>{escape(r)}</li>" for r in reasons) + "</ul>"


# Short headers keep the scores narrow beside the "Here" text; each header's tooltip names the dimension in full.
ENGINE_COLUMNS = ("Engine", "Total", "Speed", "Fit", "Feat.", "Ops", "Eco.", "Here")
ENGINE_COLUMN_TIPS = (
    "",
    "Weighted score for this use",
    "Throughput for this use",
    "Hardware fit on this machine",
    "Features: quantization, continuous batching, tensor parallelism, OpenAI API",
    "Operational complexity (5: simplest to run)",
    "Ecosystem",
    "What it lacks here, or that it is ready",
)


def engine_cells(fit: EngineFitRecord) -> tuple[str, ...]:
    """One scored engine (the recommendation's `engines`) as the cells of ENGINE_COLUMNS: its 0-5 scores and what
    it lacks on this machine for this model, or that it is ready."""
    scores = fit["scores"]
    here = [str(item) for item in (*fit.get("lacks", ()), *fit.get("notes", ()))]
    if fit.get("launched") and fit.get("installed") is None:
        here.append("installation not checked")
    if fit.get("usable"):
        here.insert(0, "installed" + (f" ({fit['version']})" if fit.get("version") else ""))
    return (
        str(fit["label"]),
        f"{float(fit['total']):.1f}",
        *(str(scores[name]) for name in ("throughput", "hardware_fit", "features", "operations", "ecosystem")),
        "; ".join(here),
    )
