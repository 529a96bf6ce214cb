"""A stand-in for `vllm serve`, shipped as `vllm/_serve.py` in the tiny `vllm` wheel the tests build
(tests/support/fake_wheel.py, `build_vllm_standin`): vLLM itself needs CUDA and its own torch, which this machine lacks.

What it shares with vLLM 0.34.0 is its outside, not its inference:
- the command line is checked against the schema extracted from vLLM's wheel (tests/fixtures/engine_cli/
  vllm-0.34.0.json) by tests/engines/cli_schema.py, both shipped beside it; a bad command exits 2 as argparse does;
- the start-up lines follow vLLM's logger prefix and messages (tests/fixtures/logs/README.md), which
  engines/vllm_log.py parses; the KV cache figures are a small computation from config.json, the weights' size, the
  flags and the GPU memory in VLLM_STANDIN_GPU_MEMORY (bytes), not vLLM's profiling;
- /health answers 503 while it "loads" (at least until one probe has seen the 503) and 200 once ready;
- /v1 routes demand the key in VLLM_API_KEY, as vLLM's middleware does; /health and /metrics do not;
- /metrics serves vLLM's names in Prometheus text (tests/fixtures/metrics/vllm_metrics.txt), counting for real;
- SIGTERM shuts it down cleanly (exit 0).
Its answers are fixed words. Standard library only: the managed environment has nothing else.
"""

from __future__ import annotations

import http.server
import importlib
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

GIB = 1 << 30
WORDS = ("Hello", " from", " the", " vLLM", " stand", "-in", ".")
# CUDA context, activations and graphs in this stand-in's arithmetic: more than the planner predicts, so that the
# check has an error to show and the gateway's capacity visibly follows what "vLLM" reported.
NON_KV_OVERHEAD = 6 * GIB
BLOCK = 16  # vLLM's KV cache block in tokens


def log(process: str, where: str, message: str) -> None:
    """One line in vLLM's format: `(<process> pid=<pid>) LEVEL MM-DD HH:MM:SS [file:line] message`."""
    stamp = time.strftime("%m-%d %H:%M:%S")
    print(f"({process} pid={os.getpid()}) INFO {stamp} [{where}] {message}", flush=True)


def flag(args: list[str], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args else None


class State:
    """What the server shares between its request threads."""

    def __init__(self, served: str, key: str | None) -> None:
        self.served = served
        self.key = key
        self.ready = threading.Event()
        self.probed_loading = threading.Event()
        self.lock = threading.Lock()
        self.running = 0
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.finished = 0

    def metrics(self) -> str:
        labels = f'engine="0",model_name="{self.served}"'
        with self.lock:
            rows = [
                ("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.", self.running),
                ("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", 0),
                ("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.",
                 0.01 * self.running),
                ("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.", self.prompt_tokens),
                ("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.",
                 self.generation_tokens),
                ("vllm:request_success_total", "counter", "Count of successfully processed requests.", self.finished),
            ]  # fmt: skip
        return "".join(
            f"# HELP {name} {text}\n# TYPE {name} {kind}\n{name}{{{labels}}} {float(value)}\n"
            for name, kind, text, value in rows
        )


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    state: State

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        phrase = http.HTTPStatus(int(code)).phrase if str(code).isdigit() else ""
        host, port = self.client_address[:2]
        print(f'INFO:     {host}:{port} - "{self.requestline}" {code} {phrase}', flush=True)

    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, payload: dict[str, Any]) -> None:
        self._send(status, json.dumps(payload).encode())

    def _authorized(self) -> bool:
        if self.state.key is None or self.headers.get("Authorization") == f"Bearer {self.state.key}":
            return True
        self._json(401, {"error": "Unauthorized"})
        return False

    def do_GET(self) -> None:
        if self.path == "/health":
            if not self.state.ready.is_set():
                self.state.probed_loading.set()
                self._send(503, b"")
            else:
                self._send(200, b"")
        elif self.path == "/metrics":
            self._send(200, self.state.metrics().encode(), "text/plain; version=0.0.4; charset=utf-8")
        elif self.path == "/v1/models":
            if self._authorized():
                self._json(200, {"object": "list", "data": [{"id": self.state.served, "object": "model"}]})
        else:
            self._json(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path != "/v1/chat/completions":
            self._json(404, {"detail": "Not Found"})
            return
        if not self._authorized():
            return
        request = json.loads(body)
        if request.get("model") != self.state.served:
            message = f"The model `{request.get('model')}` does not exist."
            self._json(404, {"error": {"message": message, "type": "NotFoundError", "param": "model", "code": 404}})
            return
        prompt = sum(len(str(m.get("content", "")).split()) for m in request.get("messages", [])) or 1
        words = WORDS[: max(1, int(request.get("max_tokens") or len(WORDS)))]
        finish = "stop" if len(words) == len(WORDS) else "length"
        usage = {"prompt_tokens": prompt, "completion_tokens": len(words), "total_tokens": prompt + len(words)}
        with self.state.lock:
            self.state.running += 1
        try:
            if request.get("stream"):
                self._stream(words, finish, usage, bool((request.get("stream_options") or {}).get("include_usage")))
            else:
                message = {"role": "assistant", "content": "".join(words)}
                self._json(200, {
                    "id": "chatcmpl-standin", "object": "chat.completion", "created": int(time.time()),
                    "model": self.state.served, "usage": usage,
                    "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                })  # fmt: skip
        finally:
            with self.state.lock:
                self.state.running -= 1
                self.state.prompt_tokens += prompt
                self.state.generation_tokens += len(words)
                self.state.finished += 1

    def _stream(self, words: tuple[str, ...], finish: str, usage: dict[str, int], include_usage: bool) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def event(choices: list[dict[str, Any]], **extra: Any) -> None:
            chunk = {"id": "chatcmpl-standin", "object": "chat.completion.chunk", "created": int(time.time()),
                     "model": self.state.served, "choices": choices, **extra}  # fmt: skip
            self._chunk(b"data: " + json.dumps(chunk).encode() + b"\n\n")

        event([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}])
        for word in words:
            time.sleep(0.005)
            event([{"index": 0, "delta": {"content": word}, "finish_reason": None}])
        event([{"index": 0, "delta": {}, "finish_reason": finish}])
        if include_usage:
            event([], usage=usage)
        self._chunk(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()


def kv_cache(model: Path, args: list[str]) -> tuple[int, int, int]:
    """(weights bytes per GPU, KV cache bytes per GPU, KV cache tokens) for this stand-in's arithmetic."""
    config = json.loads((model / "config.json").read_text(encoding="utf-8"))
    tp = int(flag(args, "--tensor-parallel-size") or 1)
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads", heads)
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    per_token = 2 * config["num_hidden_layers"] * kv_heads * head_dim * 2 // tp  # K and V, 16-bit
    weights = sum(f.stat().st_size for f in model.glob("*.safetensors")) // tp
    gpu = int(os.environ.get("VLLM_STANDIN_GPU_MEMORY", 80 * GIB))
    budget = int(gpu * float(flag(args, "--gpu-memory-utilization") or 0.9))
    kv_bytes = max(0, budget - weights - NON_KV_OVERHEAD)
    return weights, kv_bytes, kv_bytes // per_token // BLOCK * BLOCK


def main(args: list[str]) -> None:
    checker = importlib.import_module("vllm.cli_schema")
    schema = json.loads(Path(__file__).with_name("vllm-0.34.0.json").read_text(encoding="utf-8"))
    problems = checker.check_command(schema, args)
    if problems:
        print(f"vllm serve: error: {'; '.join(problems)}", file=sys.stderr, flush=True)
        sys.exit(2)
    model = Path(args[0])
    if not (model / "config.json").is_file():
        print(f"vllm serve: error: {model} is not a model directory (no config.json)", file=sys.stderr, flush=True)
        sys.exit(1)
    served = flag(args, "--served-model-name") or str(model)
    host, port = flag(args, "--host") or "0.0.0.0", int(flag(args, "--port") or 8000)
    max_len = int(flag(args, "--max-model-len") or 4096)
    log("APIServer", "utils.py:253", f"non-default args: {{'model_tag': {str(model)!r}, 'port': {port}}}")
    state = State(served, os.environ.get("VLLM_API_KEY") or flag(args, "--api-key"))
    Handler.state = state
    server = http.server.ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    weights, kv_bytes, tokens = kv_cache(model, args)
    log("EngineCore", "default_loader.py:544", "Loading weights took 0.01 seconds")
    log(
        "EngineCore",
        "gpu/model_runner.py:442",
        f"Model loading took {round(weights / GIB, 2)} GiB memory and 0.020000 seconds",
    )
    log("EngineCore", "gpu_worker.py:796", f"Available KV cache memory: {round(kv_bytes / GIB, 2)} GiB")
    log("EngineCore", "kv_cache_utils.py:1169",
        f"GPU KV cache size: {tokens:,} tokens, Maximum concurrency for {max_len:,} tokens per request: "
        f"{tokens / max_len:.2f}x")  # fmt: skip
    state.probed_loading.wait(30)  # "loading" until the supervisor has been told so once
    log("EngineCore", "core.py:459", "init engine (profile, create kv cache, warmup model) took 0.10 s")
    log("APIServer", "api_server.py:1351", f"Starting vLLM API server 0 on http://{host}:{port}")
    state.ready.set()
    print("INFO:     Application startup complete.", flush=True)
    while not stop.wait(0.5):
        pass
    print("INFO:     Shutting down", flush=True)
    server.shutdown()
    server.server_close()
    print("INFO:     Application shutdown complete.", flush=True)
