"""llama.cpp through llama-cpp-python's OpenAI-compatible server, run as a subprocess."""

from __future__ import annotations

import sys
from importlib import metadata, util
from pathlib import Path

from engines.base import Capabilities, EngineCommand, InputLimit, Installation, LaunchPlan, openmp_wait_env
from engines.python_entry import module_command, script_command

DISTRIBUTION = "llama-cpp-python"
# The GPU backends' libraries llama-cpp-python's build puts beside libllama (.so, .dylib or .dll).
GPU_LIBRARIES = ("*ggml-cuda*", "*ggml-metal*", "*ggml-vulkan*", "*ggml-hip*")
# Its server with a prompt cache that counts all each entry holds (see the module): used when the plan has a cache.
CACHED_SERVER = Path(__file__).with_name("_llama_cpp_server.py")


class LlamaCppPythonEngine:
    """`python -m llama_cpp.server`: one request at a time, readiness through /v1/models (it has no /health)."""

    name = "llama-cpp-python"
    # One request at a time, no usage in streams, per-token embeddings (its server has no pooling option), no
    # logprobs: they need `logits_all`, which is turned off below; text only: no vision or audio projector (mmproj),
    # no token ids as embedding input.
    capabilities = Capabilities(
        max_concurrency=1,
        stream_usage=False,
        tokenize_count_path="/extras/tokenize/count",
        embeddings_pooled=False,
        logprobs=False,
        media_parts=False,
        token_inputs=False,  # its embeddings take text only
    )

    def detect(self) -> Installation:
        try:
            version = metadata.version(DISTRIBUTION)
        except metadata.PackageNotFoundError:
            return Installation(False, None, f"{DISTRIBUTION} is not installed in {sys.prefix}")
        return Installation(True, version, f"{DISTRIBUTION} {version} in {sys.prefix}")

    def gpu_offload(self) -> bool:
        """Whether the installed llama_cpp was built with a GPU backend, from its library folder (importing it
        would load the libraries into the service)."""
        spec = util.find_spec("llama_cpp")
        if spec is None or spec.origin is None:
            return False
        lib = Path(spec.origin).parent / "lib"
        return any(any(lib.glob(pattern)) for pattern in GPU_LIBRARIES)

    def embedding_limit(self, plan: LaunchPlan) -> InputLimit:
        """Its server cuts each input to its batch (`--n_batch`, which it caps at `--n_ctx`) without a word."""
        return InputLimit(min(plan.batch_size, plan.context_length), "its batch: the smaller of the model's `batch` "
                          "and `context` load settings")  # fmt: skip

    def build_command(self, plan: LaunchPlan, port: int, api_key: str) -> EngineCommand:
        # Isolated (-I): the script's directory, which holds this module, must not shadow the llama_cpp package.
        cached = plan.prompt_cache_bytes > 0
        server = script_command(CACHED_SERVER, site=True) if cached else module_command("llama_cpp.server")
        argv = [
            *server,
            "--model", str(plan.model_path),
            "--model_alias", plan.model_id,
            "--host", "127.0.0.1",
            "--port", str(port),
            "--n_ctx", str(plan.context_length),
            "--n_threads", str(plan.threads),
            "--n_threads_batch", str(plan.threads),
            "--n_batch", str(plan.batch_size),
            "--n_gpu_layers", str(plan.gpu_layers),
            # Its default aborts the stream in flight whenever another request arrives.
            "--interrupt_requests", "false",
            # Its default keeps logits for every position: a context x vocabulary float32 array (1.5 GiB for
            # SmolLM2 at 8192 tokens, 16 GiB for a 128k vocabulary at 32k) that only `logprobs` would use.
            "--logits_all", "false",
        ]  # fmt: skip
        if plan.prompt_cache_bytes > 0:
            # One model context serves every client: without a cache, each conversation that takes its turn after
            # another one has its whole prompt evaluated again. The cache keeps the state after each answer, and a
            # request whose prompt extends a cached one resumes from it.
            argv += ["--cache", "true", "--cache_type", "ram", "--cache_size", str(plan.prompt_cache_bytes)]
        if plan.embeddings:
            argv += ["--embedding", "true"]
        if plan.chat_format:
            argv += ["--chat_format", plan.chat_format]
        if plan.lookup_tokens > 0:
            argv += [
                "--draft_model",
                "prompt-lookup-decoding",
                "--draft_model_num_pred_tokens",
                str(plan.lookup_tokens),
            ]
        return EngineCommand(
            argv=tuple(argv),
            # The server's settings read API_KEY from the environment, which keeps the key off the command line.
            env={"API_KEY": api_key, **openmp_wait_env(plan)},
            ready_path="/v1/models",
            ready_headers={"Authorization": f"Bearer {api_key}"},
            secrets=(api_key,),
        )
