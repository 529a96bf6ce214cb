"""llama.cpp's own server (`llama-server`): continuous batching over `--parallel` slots, /health and /metrics.

The executable is found at a configured path, in ModelDeck's engine builds (`<root>/llama-server-<version>-<backend>/`
with a build-info.json beside it, written by the build driver), or on PATH, in that order.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engines.base import Capabilities, EngineCommand, InputLimit, Installation, LaunchPlan, openmp_wait_env

EXECUTABLE = "llama-server"
BUILD_INFO = "build-info.json"
MAX_PARALLEL = 64
# A portable build's CPU code, one library per instruction-set level (libggml-cpu-haswell.so, ...). At start ggml
# loads the one whose `ggml_backend_score()` is highest on this CPU (0: unsupported); the pinned build does not log
# which at its default verbosity, so ModelDeck asks the same function.
CPU_VARIANT = re.compile(r"libggml-cpu-([A-Za-z0-9_.]+)\.so")


def cpu_variant(folder: Path) -> str | None:
    """The CPU variant a portable llama-server in `folder` loads on this machine (`haswell`), by ggml's own scoring;
    None for a build with its CPU code linked in (one made for this machine) or when no variant runs here."""
    scores: dict[str, int] = {}
    for library in sorted(folder.glob("libggml-cpu-*.so")):
        match = CPU_VARIANT.fullmatch(library.name)
        try:
            score = ctypes.CDLL(str(library), mode=os.RTLD_LOCAL).ggml_backend_score
        except (OSError, AttributeError):  # not loadable here, or not a ggml CPU backend
            continue
        score.restype = ctypes.c_int
        if match is not None:
            scores[match.group(1)] = score()
    best = max(scores, key=scores.__getitem__, default=None)
    return best if best is not None and scores[best] > 0 else None


@dataclass(frozen=True)
class Build:
    """One llama-server build in an engine-builds directory."""

    executable: Path
    version: str  # the llama-cpp-python release whose vendored sources it was built from
    backend: str  # cpu, cuda or metal


def installed_builds(root: Path) -> list[Build]:
    """The builds under `root`, newest version first. A directory without a readable build-info.json is not one."""
    builds: list[Build] = []
    if not root.is_dir():
        return builds
    for directory in sorted(root.glob(f"{EXECUTABLE}-*")):
        executable = directory / EXECUTABLE
        info = _build_info(directory)
        if info is None or not executable.is_file():
            continue
        version = str(info.get("llama_cpp_python") or "unknown")
        builds.append(Build(executable, version, str(info.get("backend") or "cpu")))
    builds.sort(key=lambda b: _version_key(b.version), reverse=True)
    return builds


def _build_info(directory: Path) -> dict[str, Any] | None:
    """The build-info.json of a ModelDeck build in `directory`; None when there is none, or not an object."""
    try:
        info = json.loads((directory / BUILD_INFO).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):  # RecursionError: nested thousands of levels deep
        return None
    return info if isinstance(info, dict) else None


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) if part.isdigit() else -1 for part in version.split("."))


def find_executable(configured: Path | None = None, build_roots: Sequence[Path] = ()) -> Path | None:
    """Where llama-server is: the configured path (even if missing, so that a wrong setting is not hidden by
    another binary), else the newest build under `build_roots`, else PATH."""
    if configured is not None:
        return configured if configured.is_file() else None
    for root in build_roots:
        builds = installed_builds(root)
        if builds:
            return builds[0].executable
    on_path = shutil.which(EXECUTABLE)
    return Path(on_path) if on_path else None


class LlamaServerEngine:
    """`llama-server`: serves `plan.parallel` requests at once, readiness through /health (503 while loading)."""

    name = "llama-server"
    # Streams carry usage when asked. Embeddings need `--embeddings`, documented as restricting the server to them
    # (the pinned build still answers chat with it, but marks every prompt token as an output): they are served by a
    # second process of the same model in embedding mode (`embedding_command`), pooled as OpenAI's are. Text only:
    # it is started without a vision or audio projector (`--mmproj`).
    capabilities = Capabilities(
        max_concurrency=MAX_PARALLEL,
        stream_usage=True,
        parallel_from_plan=True,
        tokenize_count_path=None,
        tokenize_path="/tokenize",
        slot_ids=True,
        media_parts=False,
    )

    def __init__(self, configured: Path | None = None, build_roots: Sequence[Path] = ()) -> None:
        self.configured = configured
        self.build_roots = tuple(build_roots)

    def executable(self) -> Path | None:
        return find_executable(self.configured, self.build_roots)

    def detect(self) -> Installation:
        executable = self.executable()
        if executable is None:
            where = f"not at {self.configured}" if self.configured else "not built and not on PATH"
            return Installation(
                False, None, f"llama-server is {where}; build it with `modeldeck engines build llama-server`"
            )
        try:
            done = subprocess.run([str(executable), "--version"], capture_output=True, text=True, timeout=30,
                                  check=False)  # fmt: skip
        except (OSError, subprocess.TimeoutExpired) as exc:
            return Installation(False, None, f"{executable} --version failed: {exc}")
        # It prints "version: 0.5.0-dev (build 1, commit 0c1e570)" on stderr.
        line = next((ln for ln in (done.stderr + done.stdout).splitlines() if ln.startswith("version:")), None)
        if done.returncode != 0 or line is None:
            return Installation(False, None, f"{executable} --version exited with {done.returncode}")
        version = line.removeprefix("version:").strip()
        variant = cpu_variant(executable.parent)
        cpu = f", CPU variant {variant}" if variant else ""
        return Installation(True, version, f"llama-server {version} at {executable}{cpu}")

    def gpu_offload(self) -> bool:
        """A ModelDeck build's backend, from its build-info; a llama-server of unknown make (on PATH) counts as
        able: it ignores `-ngl` without a GPU backend."""
        executable = self.executable()
        if executable is None:
            return False
        info = _build_info(executable.parent)
        return info is None or str(info.get("backend") or "cpu") != "cpu"

    def build_command(self, plan: LaunchPlan, port: int, api_key: str) -> EngineCommand:
        parallel = max(1, min(plan.parallel, MAX_PARALLEL))
        chat = ["--chat-template", plan.chat_format] if plan.chat_format else []
        draft = [
            # Without --spec-type the pinned build loads the draft model and never drafts with it.
            "--model-draft", str(plan.draft_path), "--spec-type", "draft-simple",
            "--spec-draft-n-max", str(plan.draft_max), "-ngld", str(plan.draft_gpu_layers),
        ] if plan.draft_path is not None else []  # fmt: skip
        return self._command(plan, port, api_key, [
            # The context is shared by the slots (unified KV cache), so `-c` is the total, not per slot.
            "-c", str(plan.context_length),
            "--parallel", str(parallel),
            "--kv-unified",
            "-b", str(plan.batch_size),
            "--metrics",
            "--jinja",
            *chat,
            *draft,
        ])  # fmt: skip

    def embedding_command(self, plan: LaunchPlan, port: int, api_key: str) -> EngineCommand:
        """`plan`'s model in embedding mode: /v1/embeddings only, one mean-pooled, normalized vector per input.
        One slot; an input is embedded in one physical batch, so the batch is the whole context."""
        return self._command(plan, port, api_key, [
            "--embeddings",
            "--pooling", "mean",
            "-c", str(plan.context_length),
            "--parallel", "1",
            "-b", str(plan.context_length),
            "-ub", str(plan.context_length),
        ])  # fmt: skip

    def embedding_limit(self, plan: LaunchPlan) -> InputLimit:
        """An input longer than the physical batch of `embedding_command(plan)` is a 500 asking for a larger one."""
        return InputLimit(plan.context_length, "the physical batch, `-ub`, of its embedding process")

    def _command(self, plan: LaunchPlan, port: int, api_key: str, mode: list[str]) -> EngineCommand:
        # A configured path that is missing still shows in the command: the plan says where it is looked for.
        argv = [
            str(self.executable() or self.configured or EXECUTABLE),
            "-m", str(plan.model_path),
            "--alias", plan.model_id,
            "--host", "127.0.0.1",
            "--port", str(port),
            # The planner has already fitted layers and context; its own fitting would change them behind our back.
            "--fit", "off",
            "-ngl", str(plan.gpu_layers),
            *mode,
            "--no-webui",
        ]  # fmt: skip
        if plan.threads > 0:
            argv += ["--threads", str(plan.threads), "--threads-batch", str(plan.threads)]
        return EngineCommand(
            argv=tuple(argv),
            # llama-server reads LLAMA_API_KEY when --api-key is not given, which keeps the key off the command line.
            # With a unified KV cache the pinned build saves every idle slot to host memory and clears it whenever a
            # task starts (`--cache-idle-slots`, on by default), and restores a prompt from there only into a slot
            # it picked itself: a request naming its slot (`id_slot`, app/service/gateway/slot_router.py) then finds it
            # empty and computes its whole history again. Set in the environment, which builds without the option
            # ignore. Idle slots keep their KV; llama-server still purges them when the cache runs out of room.
            env={"LLAMA_API_KEY": api_key, **openmp_wait_env(plan), "LLAMA_ARG_CACHE_IDLE_SLOTS": "false"},
            ready_path="/health",
            secrets=(api_key,),
        )
