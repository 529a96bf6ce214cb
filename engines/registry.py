"""Engine adapters by name. Filled here, explicitly, never as a side effect of importing an adapter."""

from __future__ import annotations

from engines.base import Engine
from engines.external import ExternalEngine
from engines.llama_cpp import LlamaCppPythonEngine
from engines.llama_server import LlamaServerEngine
from engines.sglang import SGLangEngine
from engines.tgi import TGIEngine
from engines.trtllm import TRTLLMEngine
from engines.vllm import VLLMEngine

ENGINES: dict[str, Engine] = {
    LlamaCppPythonEngine.name: LlamaCppPythonEngine(),
    ExternalEngine.name: ExternalEngine(),
    VLLMEngine.name: VLLMEngine(),
    # Found on PATH only; the service adds ModelDeck's own builds and the configured path (app.installs.available).
    LlamaServerEngine.name: LlamaServerEngine(),
    SGLangEngine.name: SGLangEngine(),
    TGIEngine.name: TGIEngine(),
    TRTLLMEngine.name: TRTLLMEngine(),
}
