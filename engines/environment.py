"""The environment an engine process starts with: an allow-list of the service's, never the whole of it.

The service's own environment holds secrets that no engine needs (`MODELDECK_API_KEY`, `MODELDECK_REMOTE_KEY_*`,
`HF_TOKEN`, a cloud provider's keys): an engine reads its environment into logs, crash reports and the
`/proc/PID/environ` of every process it starts. So engines get only what they need to run, per kind:
- every engine: the search path, the user's home and locale, temporary folders, time zone, proxies and CA bundles
  (vLLM and SGLang fetch tokenizers and configs);
- native builds (llama-server, llama-cpp-python): the dynamic loader path and OpenMP / BLAS / GGML settings;
- GPU engines (vLLM, SGLang, TGI, TensorRT-LLM): CUDA, NVIDIA, NCCL, ROCm / HIP, PyTorch, Triton and their own
  settings, Ray and MPI for multi-node launches, Hugging Face cache locations (not its token);
- Windows: the variables without which a process cannot start there.
Whatever an adapter sets for its command (its key, its wait policy) is added on top by the caller.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

_NAMES = frozenset({
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TEMP", "TMP",
    "LD_LIBRARY_PATH", "DYLD_LIBRARY_PATH", "DYLD_FALLBACK_LIBRARY_PATH",
    "http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "all_proxy",
    "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
    "VIRTUAL_ENV", "CONDA_PREFIX", "PYTHONUNBUFFERED", "PYTHONIOENCODING", "PYTHONUTF8",
    "HF_HOME", "HF_HUB_CACHE", "HF_HUB_OFFLINE", "HF_ENDPOINT", "TRANSFORMERS_CACHE", "TRANSFORMERS_OFFLINE",
    "HF_HUB_DISABLE_TELEMETRY", "DO_NOT_TRACK",
    "CC", "CXX",  # Triton and torch.compile build kernels at start-up
    # Windows
    "SYSTEMROOT", "SYSTEMDRIVE", "WINDIR", "COMSPEC", "PATHEXT", "USERPROFILE", "APPDATA", "LOCALAPPDATA",
    "PROGRAMDATA", "PROGRAMFILES", "PROGRAMFILES(X86)", "NUMBER_OF_PROCESSORS", "PROCESSOR_ARCHITECTURE",
})  # fmt: skip
_PREFIXES = (
    "LC_", "XDG_",
    "OMP_", "KMP_", "GOMP_", "MKL_", "OPENBLAS_", "BLIS_", "GGML_",
    "CUDA_", "NVIDIA_", "NCCL_", "CUDNN_", "CUBLAS_", "TORCH_", "PYTORCH_", "TRITON_", "NVTE_",
    "HIP_", "ROCM_", "ROCR_", "HSA_", "GPU_DEVICE_ORDINAL",
    "VLLM_", "SGLANG_", "TRTLLM_", "TLLM_", "RAY_", "OMPI_", "PMIX_",
)  # fmt: skip
# Within an allowed family, a name that says it holds a secret still stays behind (VLLM_API_KEY, RAY_..._TOKEN).
_SECRET = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH", re.IGNORECASE)


def allowed(name: str) -> bool:
    """Whether an engine may inherit the service's variable `name`."""
    if _SECRET.search(name):
        return False
    return name in _NAMES or name.upper() in _NAMES or name.startswith(_PREFIXES)


def engine_environment(inherited: Mapping[str, str], own: Mapping[str, str]) -> dict[str, str]:
    """The allowed part of `inherited` (the service's environment), then `own` (what the command sets) over it."""
    return {**{name: value for name, value in inherited.items() if allowed(name)}, **own}
