"""The engines this machine can run, with llama-server looked up where ModelDeck keeps its builds."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from app.installs.vllm_env import configured_engines
from app.paths import AppPaths
from engines.base import Engine
from engines.llama_server import LlamaServerEngine
from engines.registry import ENGINES
from engines.sglang import SGLangEngine
from engines.trtllm import TRTLLMEngine

# A llama-server executable to use instead of looking for one (a build of the user's own, say).
LLAMA_SERVER_ENV = "MODELDECK_LLAMA_SERVER"


# Where a packaged build carries its portable llama-server, inside the frozen app's data folder.
PACKAGED_BUILDS = "engine-builds"


def packaged_engine_builds() -> Path | None:
    """The engine builds a packaged ModelDeck ships (None when running from source)."""
    bundle = getattr(sys, "_MEIPASS", None)
    return Path(bundle) / PACKAGED_BUILDS if getattr(sys, "frozen", False) and bundle else None


def llama_server_engine(paths: AppPaths) -> LlamaServerEngine:
    """llama-server at $MODELDECK_LLAMA_SERVER if set, else ModelDeck's newest build (the user's own, then the one a
    package ships), else on PATH."""
    configured = os.environ.get(LLAMA_SERVER_ENV)
    roots = (paths.engine_builds, *filter(None, [packaged_engine_builds()]))
    return LlamaServerEngine(Path(configured).expanduser() if configured else None, roots)


def available_engines(paths: AppPaths) -> dict[str, Engine]:
    """Every registered engine by name, llama-server searching ModelDeck's builds too and vLLM from its own
    environment when one is registered (`modeldeck vllm-env`), TensorRT-LLM and SGLang with their options files
    beside the engine records. Installed or not: ask `detect()`."""
    return {**ENGINES, **configured_engines(paths), LlamaServerEngine.name: llama_server_engine(paths),
            TRTLLMEngine.name: TRTLLMEngine(run_dir=paths.engine_records),
            SGLangEngine.name: SGLangEngine(run_dir=paths.engine_records)}  # fmt: skip
