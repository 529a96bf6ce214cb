"""Published quality figures per quantization type: what to show for a variant nobody measured here.

They are llama.cpp's own, from the type table of `tools/quantize/quantize.cpp` in the pinned sources
(llama-cpp-python 0.3.36): the perplexity increase over the 16-bit model on wikitext-2, measured on Llama-3-8B
(F16 and BF16 on Mistral-7B). They say how types compare on a large model, not what this model loses on this text:
every use labels them as published, never as measured.
"""

from __future__ import annotations

from dataclasses import dataclass

SOURCE = "llama-quantize's type table"

# type: (perplexity increase in absolute PPL units, the model it was measured on)
_PUBLISHED: dict[str, tuple[float, str]] = {
    "Q2_K": (3.5199, "Llama-3-8B"),
    "Q2_K_S": (3.1836, "Llama-3-8B"),
    "Q3_K_S": (1.6321, "Llama-3-8B"),
    "Q3_K_M": (0.6569, "Llama-3-8B"),
    "Q3_K_L": (0.5562, "Llama-3-8B"),
    "Q4_0": (0.4685, "Llama-3-8B"),
    "Q4_1": (0.4511, "Llama-3-8B"),
    "Q4_K_S": (0.2689, "Llama-3-8B"),
    "Q4_K_M": (0.1754, "Llama-3-8B"),
    "Q5_0": (0.1316, "Llama-3-8B"),
    "Q5_1": (0.1062, "Llama-3-8B"),
    "Q5_K_S": (0.1049, "Llama-3-8B"),
    "Q5_K_M": (0.0569, "Llama-3-8B"),
    "Q6_K": (0.0217, "Llama-3-8B"),
    "Q8_0": (0.0026, "Llama-3-8B"),
    "F16": (0.0020, "Mistral-7B"),
    "BF16": (-0.0050, "Mistral-7B"),
}


@dataclass(frozen=True)
class PublishedLoss:
    """A type's published perplexity increase and the model it was measured on."""

    quantization: str
    ppl_increase: float
    measured_on: str

    def text(self) -> str:
        return f"{self.ppl_increase:+.4f} PPL on {self.measured_on} (published, {self.quantization})"


def published_loss(quantization: str | None) -> PublishedLoss | None:
    """The published figure of `quantization` (Q4_K_M, ...); None for a type llama.cpp publishes none for."""
    if quantization is None:
        return None
    found = _PUBLISHED.get(quantization.upper().removeprefix("UD-"))
    return None if found is None else PublishedLoss(quantization.upper(), found[0], found[1])


def published_types() -> tuple[str, ...]:
    return tuple(_PUBLISHED)
