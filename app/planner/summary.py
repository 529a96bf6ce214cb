"""A Recommendation as a few lines a person reads: what `modeldeck recommend` prints."""

from __future__ import annotations

from app.byte_size import format_bytes
from app.planner.engine_choice import fit_line
from app.planner.recommend import Option, Recommendation


def _size(size: int) -> str:
    return format_bytes(size)


def _memory(option: Option) -> str:
    memory = option.memory
    where = []
    if memory.ram:
        where.append(f"{_size(memory.ram)} RAM")
    if memory.vram:
        where.append(f"{_size(memory.vram)} VRAM" + (f" on each of {memory.gpus} GPUs" if memory.gpus > 1 else ""))
    parts = ", ".join(f"{part.name} {_size(part.ram + part.vram)}" for part in memory.parts)
    return f"{' + '.join(where)} ({parts})"


def _speed(option: Option) -> str:
    if not option.decode_tokens_per_s:
        return "speed unknown"
    return f"up to ~{option.decode_tokens_per_s:.0f} tok/s (memory-bandwidth bound)"


def summary_lines(model_id: str, recommendation: Recommendation) -> list[str]:
    """The best option with its reasons, memory and command, then the alternatives one line each."""
    lines = [f"Model    {model_id}   use: {recommendation.use}"]
    best = recommendation.best
    if best is not None:
        lines += [
            f"Engine   {best.engine}, {best.variant}, {best.tier.upper()}, context {best.context}, {_speed(best)}",
            f"Memory   {_memory(best)}",
            f"Quality  {best.quality_loss['label']}" if best.quality_loss else "",
            *(f"  - {reason}" for reason in best.reasons),
            f"Command  {' '.join(best.command)}" if best.command else "",
        ]
    lines += [f"Problem  {problem}" for problem in recommendation.problems]
    if recommendation.alternatives:
        lines.append("Alternatives")
        for option in recommendation.alternatives:
            verdict = "fits" if option.fits else "does not fit"
            lines.append(
                f"  {option.engine:17} {option.variant:8} {option.tier:7} {verdict:12} max context "
                f"{option.max_context:>6}  {_memory(option)}  {_speed(option)}"
                + (f"  quality {option.quality_loss['label']}" if option.quality_loss else "")
            )
    if recommendation.engines:
        lines.append("Engines  scored 0-5 for this model here (operations: 5 is the simplest to run)")
        lines += [f"  {fit_line(fit)}" for fit in recommendation.engines]
    return [line for line in lines if line]
