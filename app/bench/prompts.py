"""The prompts a benchmark sends: seeded, so a run repeats; distinct per request unless a mode shares on purpose.

Identical prompts measure the engine's prompt cache, not the model: after the first request every engine answers
from its cache (docs/ARCHITECTURE.md, "Prompt caches"). So by default every request gets its own prompt of the same
length.

- `unique`: every request its own words.
- `shared-prefix`: the same first `prefix_words` words in every request (a system prompt, a shared document),
  then words of its own.
- `multi-turn`: conversations; the first turn is a unique prompt, each later turn the history, the previous answer
  and a new user message (`follow_up`).
- `identical`: one prompt for every request, the old behaviour, kept to compare with the others.

A prompt is filler words and then an instruction that asks for a long answer. Every word in WORDS is one token,
with its leading space, in the vocabularies of common models (checked on the bundled SmolLM2 by
tests/app/bench/test_bench_prompts.py), so N words are N tokens; the sweep measures what the chat template and the
instruction add and chooses N so that the whole prompt has the length asked for.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from typing import Literal, get_args

PromptMode = Literal["unique", "shared-prefix", "multi-turn", "identical"]
PROMPT_MODES: tuple[PromptMode, ...] = get_args(PromptMode)
DEFAULT_PROMPT_MODE: PromptMode = "unique"
# Cards written before prompt modes existed sent one prompt, again and again.
LEGACY_PROMPT_MODE: PromptMode = "identical"
INSTRUCTION = "\nCount upwards from one, in words, without stopping:"
FOLLOW_UP_INSTRUCTION = "\nGo on counting from where you stopped:"
FOLLOW_UP_WORDS = 24  # the new user message of each turn after the first, before its instruction
DEFAULT_TURNS = 4  # multi-turn: turns per conversation
MAX_TURNS = 64
MIN_OWN_WORDS = 4  # the fewest words a prompt has of its own (in `identical`, shared by all)

WORDS = (
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by", "on", "not",
    "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an", "had", "they", "you", "were",
    "their", "one", "all", "we", "can", "her", "has", "there", "been", "if", "more", "when", "will", "would",
    "who", "so", "no", "she", "other", "its", "may", "these", "what", "them", "than", "some", "him", "time",
    "into", "only", "do", "two", "first", "new", "could", "then", "also", "any", "like", "my", "now", "over",
    "such", "our", "man", "me", "even", "most", "made", "after", "many", "before", "must", "through", "back",
    "years", "where", "much", "your", "way", "well", "down", "should", "because", "each", "just", "those",
    "people", "how", "too", "little", "state", "good", "very", "make", "world", "still", "own", "see", "men",
    "work", "long", "get", "here", "between", "both", "life", "being", "under", "never", "day", "same",
    "another", "know", "while", "last", "might", "us", "great", "old", "year", "off", "come", "since", "against",
    "go", "came", "right", "used", "take", "three", "small", "house", "use", "during", "without", "again",
    "place", "around", "however", "home", "found", "high", "part", "every", "water", "school", "war", "look",
    "word", "number", "light", "point", "hand", "city", "music", "game", "book", "river", "road", "money",
    "team", "table", "window", "door", "street", "tree", "horse", "bird", "family", "night",
    "summer", "winter", "country", "market", "church", "field", "power", "story", "voice",
    "friend", "doctor", "letter", "paper", "picture", "question", "answer", "reason", "idea", "group", "party",
    "office", "company", "system", "program", "order", "change", "form", "line", "side", "head", "face", "body",
    "mind", "heart", "love", "color", "black", "white", "red", "green", "blue", "gold", "fire", "stone", "sea",
    "sun", "moon", "star", "king", "ship", "train", "car", "bank", "law", "court", "art",
    "film", "song", "food", "bread", "milk", "wine", "fish", "dog", "cat", "apple", "box",
    "cup", "key", "bed", "chair", "wall", "floor", "glass", "rain", "snow", "wind", "cold", "warm", "hot",
    "open", "close", "begin", "end", "early", "late", "young", "happy", "strong", "free", "true", "real",
)  # fmt: skip
_RADIX = len(WORDS)


def _order(seed: int, stream: str) -> list[str]:
    """WORDS in an order of this seed and stream: the first words of requests 0, 1, 2 ... differ (see `_words`)."""
    shuffled = list(WORDS)
    random.Random(f"{seed}/{stream}/order").shuffle(shuffled)
    return shuffled


@dataclass(frozen=True)
class PromptSet:
    """The prompts of one run. `words` is the length of a first-turn prompt in filler words: the length asked for
    less what the chat template and the instruction add; `prefix_words` of them are shared in `shared-prefix`."""

    mode: PromptMode
    seed: int
    words: int
    prefix_words: int = 0

    def __post_init__(self) -> None:
        if self.mode not in PROMPT_MODES:
            raise ValueError(f"prompt mode must be one of {', '.join(PROMPT_MODES)}, got {self.mode!r}")
        own = self.words - (self.prefix_words if self.mode == "shared-prefix" else 0)
        if own < MIN_OWN_WORDS:
            raise ValueError(f"a {self.mode} prompt of {self.words} words leaves {own} to each request, fewer than "
                             f"{MIN_OWN_WORDS}: ask for more prompt tokens or a shorter prefix")  # fmt: skip
        if self.prefix_words < 0:
            raise ValueError(f"the prefix cannot be {self.prefix_words} words")

    def _words(self, stream: str, index: int, count: int) -> list[str]:
        """`count` seeded words for request `index` of `stream`. The first two spell `index` in base len(WORDS)
        (after a seeded shuffle), so the requests of a stream differ from their first word on, up to 65,536 of
        them; the rest are drawn at random."""
        order = _order(self.seed, stream)
        spelled = [order[index % _RADIX], order[(index // _RADIX) % _RADIX]][:count]
        draw = random.Random(f"{self.seed}/{stream}/{index}")
        return spelled + [draw.choice(WORDS) for _ in range(count - len(spelled))]

    def prompt(self, stream: str, index: int) -> str:
        """The user message of request `index` of `stream` (a level, or the warm-up): the first turn in
        `multi-turn`; one prompt whatever the stream and index in `identical`."""
        if self.mode == "identical":
            words = self._words("identical", 0, self.words)
        elif self.mode == "shared-prefix":
            prefix = self._words("prefix", 0, self.prefix_words)
            words = prefix + self._words(stream, index, self.words - self.prefix_words)
        else:
            words = self._words(stream, index, self.words)
        return " ".join(words) + INSTRUCTION

    def follow_up(self, stream: str, conversation: int, turn: int) -> str:
        """The new user message of turn `turn` (2, 3, ...) of a conversation."""
        words = self._words(f"{stream}/turn{turn}", conversation, FOLLOW_UP_WORDS)
        return " ".join(words) + FOLLOW_UP_INSTRUCTION


def calibration_prompt(words: int, seed: int) -> str:
    """A prompt of `words` filler words, like the others in shape but sent only to count tokens."""
    draw = random.Random(f"{seed}/calibration")
    return " ".join(draw.choice(WORDS) for _ in range(words)) + INSTRUCTION


def digest(texts: list[str]) -> str:
    """A short hash of the user messages a run sent, in order: two runs with the same seed show the same one."""
    hashed = hashlib.sha256()
    for text in texts:
        hashed.update(text.encode())
        hashed.update(b"\0")
    return hashed.hexdigest()[:16]


def mode_label(mode: str) -> str:
    """A prompt mode in words, for cards and tables."""
    return {
        "unique": "unique (each request its own prompt)",
        "shared-prefix": "shared prefix, then each request its own words",
        "multi-turn": "multi-turn conversations, interleaved",
        "identical": "identical (every request the same prompt: measures the prompt cache)",
    }.get(mode, mode)


__all__ = [
    "DEFAULT_PROMPT_MODE",
    "DEFAULT_TURNS",
    "FOLLOW_UP_WORDS",
    "INSTRUCTION",
    "LEGACY_PROMPT_MODE",
    "MAX_TURNS",
    "MIN_OWN_WORDS",
    "PROMPT_MODES",
    "WORDS",
    "PromptMode",
    "PromptSet",
    "calibration_prompt",
    "digest",
    "mode_label",
]  # fmt: skip
