"""Model facts the memory model needs, from a checked GGUF header or from a Hub config.json plus safetensors metadata.

Unknown facts are None. Nothing here reads tensor data.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from engines.gguf import ARCH_COUNT_LIMITS, GGUFInfo, Scalar

# safetensors dtype -> bytes per element
_SAFETENSORS_BYTES = {
    "F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4, "F16": 2, "BF16": 2, "I16": 2, "U16": 2,
    "F8_E4M3": 1, "F8_E5M2": 1, "I8": 1, "U8": 1, "BOOL": 1,
}  # fmt: skip


# config.json key -> the bound of the GGUF key that holds the same count (engines.gguf)
_CONFIG_LIMITS = {
    "num_hidden_layers": ARCH_COUNT_LIMITS["block_count"],
    "num_attention_heads": ARCH_COUNT_LIMITS["attention.head_count"],
    "num_key_value_heads": ARCH_COUNT_LIMITS["attention.head_count_kv"],
    "head_dim": ARCH_COUNT_LIMITS["attention.key_length"],
    "hidden_size": ARCH_COUNT_LIMITS["embedding_length"],
    "intermediate_size": ARCH_COUNT_LIMITS["feed_forward_length"],
    "vocab_size": ARCH_COUNT_LIMITS["vocab_size"],
    "max_position_embeddings": ARCH_COUNT_LIMITS["context_length"],
}


class ImplausibleConfig(ValueError):
    """A config.json count no model has (2**31 layers): refused before anything is sized by it."""


@dataclass(frozen=True)
class ModelFacts:
    """What a model is, as far as serving it goes. kv_heads holds one count per layer."""

    format: str  # "gguf" or "safetensors"
    architecture: str | None
    parameters: int | None
    layers: int | None
    attention_heads: int | None
    kv_heads: tuple[int, ...] | None
    head_dim_k: int | None
    head_dim_v: int | None
    embedding_length: int | None
    feed_forward_length: int | None
    vocab_size: int | None
    trained_context: int | None
    quantization: str | None  # Q4_K_M, Q8_0, BF16, AWQ, GPTQ, FP8, ...
    weight_bytes: int | None
    chat_template: bool | None
    dtype: str | None = None  # safetensors: the dtype of the unquantized tensors

    @property
    def bits_per_weight(self) -> float | None:
        if not self.weight_bytes or not self.parameters:
            return None
        return self.weight_bytes * 8 / self.parameters

    def kv_bytes_per_token(self, bytes_per_element: float = 2.0) -> int | None:
        """KV-cache bytes one token of context costs across all layers (f16 cache: 2 bytes an element)."""
        if self.kv_heads is None or self.head_dim_k is None or self.head_dim_v is None:
            return None
        return int(sum(self.kv_heads) * (self.head_dim_k + self.head_dim_v) * bytes_per_element)

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "bits_per_weight": self.bits_per_weight,
            "kv_bytes_per_token": self.kv_bytes_per_token(),
        }


def _int(value: Scalar | None) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _per_layer(info: GGUFInfo, key: str, layers: int | None) -> tuple[int, ...] | None:
    """A per-layer count stored as one number or as an array of one number a layer."""
    array = info.arrays.get(key)
    if array is not None:
        return tuple(int(v) for v in array)
    value = _int(info.metadata.get(key))
    if value is None or layers is None:
        return None
    return (value,) * layers


def facts_from_gguf(info: GGUFInfo) -> ModelFacts:
    """Facts from a GGUF header read by engines.gguf.read_gguf_info (bounded, so hostile files never get here)."""
    arch = info.architecture
    meta = info.metadata
    layers = _int(meta.get(f"{arch}.block_count"))
    heads_per_layer = _per_layer(info, f"{arch}.attention.head_count", layers)
    heads = max(heads_per_layer) if heads_per_layer else None
    kv_heads = _per_layer(info, f"{arch}.attention.head_count_kv", layers) or heads_per_layer
    embedding = _int(meta.get(f"{arch}.embedding_length"))
    default_head_dim = embedding // heads if embedding and heads else None
    vocab = _int(meta.get(f"{arch}.vocab_size")) or info.array_lengths.get("tokenizer.ggml.tokens")
    parameters = sum(info.tensor_elements.values()) or None
    return ModelFacts(
        format="gguf",
        architecture=arch,
        parameters=parameters,
        layers=layers,
        attention_heads=heads,
        kv_heads=kv_heads,
        head_dim_k=_int(meta.get(f"{arch}.attention.key_length")) or default_head_dim,
        head_dim_v=_int(meta.get(f"{arch}.attention.value_length")) or default_head_dim,
        embedding_length=embedding,
        feed_forward_length=max(ffn) if (ffn := _per_layer(info, f"{arch}.feed_forward_length", layers)) else None,
        vocab_size=vocab,
        trained_context=info.context_length,
        quantization=info.quantization,
        weight_bytes=info.tensor_bytes or None,
        chat_template=info.has_chat_template,
    )


def _quant_method(config: Mapping[str, Any]) -> str | None:
    quant = config.get("quantization_config")
    if not isinstance(quant, Mapping):
        return None
    method = quant.get("quant_method")
    return str(method).upper() if method else None


def facts_from_hf_config(config: Mapping[str, Any], parameters_by_dtype: Mapping[str, int]) -> ModelFacts:
    """Facts of a safetensors model from its config.json and the element counts per dtype in its safetensors headers.

    Packed 4-bit weights (AWQ, GPTQ) are stored as I32 holding 32/bits weights each; they are counted unpacked.
    """
    text = config.get("text_config")
    if isinstance(text, Mapping):  # multimodal wrappers keep the language model's numbers here
        config = {**config, **text}
    quantization = _quant_method(config)
    quant = config.get("quantization_config")
    bits = quant.get("bits", 4) if isinstance(quant, Mapping) else 4
    packed = 32 // bits if quantization in ("AWQ", "GPTQ") and isinstance(bits, int) and bits > 0 else 1
    parameters = sum(n * (packed if dtype == "I32" else 1) for dtype, n in parameters_by_dtype.items()) or None
    weight_bytes = sum(n * _SAFETENSORS_BYTES.get(dtype, 2) for dtype, n in parameters_by_dtype.items()) or None
    counts = _config_counts(config)
    layers, heads, hidden = counts["num_hidden_layers"], counts["num_attention_heads"], counts["hidden_size"]
    kv = counts["num_key_value_heads"] if "num_key_value_heads" in config else heads
    head_dim = counts["head_dim"] or (hidden // heads if hidden and heads else None)
    dtype = config.get("torch_dtype") or config.get("dtype")
    architectures = config.get("architectures")
    return ModelFacts(
        format="safetensors",
        architecture=str(architectures[0]) if isinstance(architectures, list) and architectures else None,
        parameters=parameters,
        layers=layers,
        attention_heads=heads,
        kv_heads=(kv,) * layers if kv is not None and layers is not None else None,
        head_dim_k=head_dim,
        head_dim_v=head_dim,
        embedding_length=hidden,
        feed_forward_length=counts["intermediate_size"],
        vocab_size=counts["vocab_size"],
        trained_context=counts["max_position_embeddings"],
        quantization=quantization
        or (str(dtype).upper().replace("BFLOAT16", "BF16").replace("FLOAT16", "F16") if dtype else None),
        weight_bytes=weight_bytes,
        chat_template=None,
        dtype=str(dtype) if dtype else None,
    )


def _config_counts(config: Mapping[str, Any]) -> dict[str, int | None]:
    """The counts config.json holds, each a whole number within its bound or None (absent, or not a number:
    some configs hold one a layer in a list). Raises ImplausibleConfig naming the key of one out of bounds."""
    counts: dict[str, int | None] = {}
    for key, limit in _CONFIG_LIMITS.items():
        value = config.get(key)
        if isinstance(value, bool) or not isinstance(value, int):
            counts[key] = None
        elif 0 <= value <= limit:
            counts[key] = value
        else:
            raise ImplausibleConfig(f"config.json: {key} is {value}, outside the plausible range 0 to {limit}")
    return counts
