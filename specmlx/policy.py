"""How many tokens a round proposes, and from where: the draft policy.

One frozen record, carried by `GenerationConfig` and by the bench's drafter
variants, so the settings that shape a round are named in one place. Every
front end writes it in one grammar: parts joined by `+`, e.g. `auto`, `4`,
`4+adaptive+pmin=0.5`, `k=6+lookup=3` (see `PARTS`); `str(policy)` writes it
back. The record refuses every combination that cannot work, whichever front
end built it, in the same words.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields, replace
from typing import Any

from .errors import SpecmlxError

# Longest tail a lookup matches: longer matches are tried first and are the
# more reliable copies.
LOOKUP_NGRAM = 8
# The draft length when not told, and where the automatic and adaptive ones start.
START_DRAFT = 4

# The grammar: `auto`, a whole number (or `k=N`), `adaptive`, and key=value parts.
AUTO, ADAPTIVE = "auto", "adaptive"
PARTS = {"k": ("num_draft", int), "max": ("max_draft", int), "pmin": ("p_min", float),
         "lookup": ("lookup", int), "lookup-draft": ("lookup_draft", int),
         "prediction-draft": ("prediction_draft", int)}
FORMS = "auto, a whole number N (or k=N), adaptive, max=N, pmin=P, lookup=N, lookup-draft=N or prediction-draft=N"
KEYS = {name: key for key, (name, _) in PARTS.items() if key != "k"}
WHAT = {"num_draft": "the draft length", "max_draft": "the longest draft", "p_min": "the draft p-min",
        "lookup": "the lookup match length", "lookup_draft": "the lookup draft length",
        "prediction_draft": "the prediction draft length"}


@dataclass(frozen=True)
class DraftPolicy:
    """`num_draft`: tokens drafted a round (default `START_DRAFT`); None
    chooses it every round, from 0 (plain decoding) to `max_draft`, for the
    most tokens per second measured (`specmlx.schedule.auto`). With `adaptive` it is where
    the length starts before it follows the acceptance history, up to `max_draft`.
    `p_min` > 0 stops a draft after a step whose top probability is below it
    (one small sync per drafted token); `num_draft` is then a cap.
    `lookup` = n > 0 first looks for the last n (up to `LOOKUP_NGRAM`) tokens
    earlier in the context and, when found, proposes up to `lookup_draft`
    tokens that followed them instead of asking the drafter: free drafts where
    the answer copies its input (code edits). A request's prediction (OpenAI's
    predicted outputs, `drafters.prediction`) proposes up to `prediction_draft`
    tokens a round wherever the output stands in it, before lookup and drafter."""

    num_draft: int | None = START_DRAFT
    max_draft: int = 16  # past 8 only a block drafter drafts (`schedule/widths.py`): a block of 16 proposes 15
    adaptive: bool = False
    p_min: float = 0.0
    lookup: int = 0
    lookup_draft: int = 8
    prediction_draft: int = 16

    def __post_init__(self) -> None:
        if self.num_draft is not None and self.num_draft < 0:
            raise SpecmlxError(f"number of draft tokens must be >= 0, got {self.num_draft}")
        if self.max_draft < 1:
            raise SpecmlxError(f"maximum draft length must be >= 1, got {self.max_draft}")
        if not 0.0 <= self.p_min < 1.0:
            raise SpecmlxError(f"draft p-min must be in [0, 1), got {self.p_min}")
        if not 0 <= self.lookup <= LOOKUP_NGRAM:
            raise SpecmlxError(f"lookup match length must be in 0..{LOOKUP_NGRAM} (0 turns it off), "
                               f"got {self.lookup}")
        if self.lookup_draft < 1:
            raise SpecmlxError(f"lookup draft length must be >= 1, got {self.lookup_draft}")
        if self.prediction_draft < 1:
            raise SpecmlxError(f"prediction draft length must be >= 1, got {self.prediction_draft}")
        if self.num_draft is None and self.adaptive:
            raise SpecmlxError(f"{AUTO} and {ADAPTIVE} both set the draft length: choose one")

    @classmethod
    def parse(cls, text: str, base: DraftPolicy | None = None) -> DraftPolicy:
        """The policy `text` writes (`"auto"`, `"4"`, `"4+adaptive+pmin=0.5"`...): the
        fields it names, the others `base`'s (default: `DraftPolicy()`'s). A length
        part says how the length is chosen, so on an adaptive base `6` alone is
        fixed. Bad input is one SpecmlxError line naming the text and its bad part."""
        try:
            named = read_parts(text)
            if "num_draft" in named:
                named.setdefault("adaptive", False)
            return replace(cls() if base is None else base, **named)
        except SpecmlxError as err:
            raise SpecmlxError(f'draft policy "{text}": {err}') from None

    def __str__(self) -> str:
        """The policy in the grammar `parse` reads: its length, then every field off its default."""
        default = DraftPolicy()
        return "+".join([part("num_draft", self.num_draft)] + [
            part(f.name, getattr(self, f.name)) for f in fields(self)
            if f.name != "num_draft" and getattr(self, f.name) != getattr(default, f.name)])

    @property
    def auto(self) -> bool:
        """The draft length is chosen each round from measured costs."""
        return self.num_draft is None

    @property
    def start(self) -> int:
        """The first rounds' draft length."""
        return START_DRAFT if self.num_draft is None else self.num_draft

    @property
    def fixed_length(self) -> bool:
        """`num_draft` drafts every round: what Leviathan's speed-up formula assumes."""
        return not self.auto and not self.adaptive and self.p_min == 0.0 and self.lookup == 0


def part(name: str, value: Any) -> str:
    """One field of `DraftPolicy` as a part of its text: `part("p_min", 0.5)` is `pmin=0.5`."""
    if name == "num_draft":
        return AUTO if value is None else str(value)
    if name == "adaptive":
        return ADAPTIVE
    return f"{KEYS[name]}={value}"


def read_parts(text: str) -> dict[str, Any]:
    """The fields a policy's text names, unchecked: `"4+pmin=0.5"` is `{"num_draft": 4, "p_min": 0.5}`.
    A field named twice is refused, naming both parts."""
    named: dict[str, Any] = {}
    given: dict[str, str] = {}
    for word in (raw.strip().lower() for raw in text.split("+")):
        name, value = _read_part(word)
        if name in given:
            first = given[name]
            raise SpecmlxError(f"{word} is given twice" if first == word
                               else f"{first} and {word} both set {WHAT[name]}: choose one")
        named[name], given[name] = value, word
    return named


def _read_part(word: str) -> tuple[str, Any]:
    if word == AUTO:
        return "num_draft", None
    if word == ADAPTIVE:
        return "adaptive", True
    if re.fullmatch(r"-?[0-9]+", word):
        return "num_draft", int(word)
    if not word:
        raise SpecmlxError(f"an empty part; expected {FORMS}, joined by +")
    key, equals, value = word.partition("=")
    if not equals or key not in PARTS:
        raise SpecmlxError(f"unknown part {word}; expected {FORMS}")
    name, kind = PARTS[key]
    try:
        return name, kind(value)
    except ValueError:
        raise SpecmlxError(f"{word}: {key} takes {'a whole number' if kind is int else 'a number'}") from None
