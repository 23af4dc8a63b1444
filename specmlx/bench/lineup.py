"""The target and the drafters it is benchmarked with, loaded once.

Every drafter is a spec string loaded by `specmlx.loading.load_models`, so a
new drafter kind needs no change here: it is one more `--drafter` value.
Suffixes make variants of a drafter, sharing its weights: a draft policy in
`DraftPolicy`'s grammar after a `+`. `+auto` chooses each round's draft length
from measured costs (one run per temperature, not one per `--num-draft`),
`+k=N` (or `+N`) drafts N a round whatever `--num-draft` says, `+adaptive` runs
it with the adaptive draft length (`--num-draft` is then where the length
starts), `+pmin=P` stops each draft once the drafter's top probability falls
below P (`--num-draft` is then a cap), `+lookup=N` proposes what followed an
earlier match of the last N+ tokens, when there is one, before drafting (up
to 8 tokens); they combine. Two words are the bench's own: `+prediction` copies
each prompt's `prediction` first (OpenAI's predicted outputs), and `+schema`
constrains each answer to its prompt's JSON `schema` (`grammar.py`); prompts
without one run as without it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import mlx.nn as nn

from ..distributed import Lockstep
from ..drafters import NGRAM, Drafter
from ..loading import ONE_PROCESS, LoadedModel, Placement, Progress, load_models, resolve_drafter
from ..policy import AUTO, START_DRAFT, DraftPolicy, read_parts

PREDICTION = "prediction"  # the variant word that copies each prompt's prediction first
SCHEMA = "schema"  # the variant word that constrains each answer to its prompt's schema
PROMPT_WORDS = (PREDICTION, SCHEMA)  # variant words that read the prompt, not the draft policy


@dataclass(frozen=True)
class Entrant:
    """One drafter under test. `name` labels it in tables; `spec` loaded it."""

    name: str
    spec: str
    drafter: Drafter
    policy: DraftPolicy = DraftPolicy(num_draft=START_DRAFT)  # num_draft is set per run unless `pinned`
    pinned: bool = False  # +k=N (or +N): policy.num_draft whatever --num-draft says
    predicted: bool = False  # +prediction: each prompt's prediction drafts first
    constrained: bool = False  # +schema: each answer matches its prompt's schema

    @property
    def model(self) -> nn.Module | None:
        """The drafter's language model, which mlx-lm can draft with too; None
        for drafters mlx-lm has no equivalent of (prompt lookup, none)."""
        return self.drafter.draft_model

    @property
    def drafts(self) -> bool:
        """False for `none`: it runs once per temperature, not once per draft length."""
        return self.drafter.drafts

    def draft_lengths(self, num_drafts: Iterable[int]) -> list[int | None]:
        """The draft length of each of its runs: None for the automatic one."""
        if not self.drafts:
            return [0]
        if self.policy.auto:
            return [None]
        return [self.policy.num_draft] if self.pinned else list(num_drafts)

    @property
    def baseline(self) -> bool:
        """Whether mlx-lm drafts with it too: a drafter model, as it is (variants are specmlx's own)."""
        return (self.model is not None and self.policy.fixed_length and not self.pinned and not self.predicted
                and not self.constrained)


@dataclass(frozen=True)
class Lineup:
    """The target, its entrants and, with a sharded target, the lockstep every engine run needs."""

    target: LoadedModel
    entrants: tuple[Entrant, ...]
    lockstep: Lockstep | None = None


def drafter_specs(target: str, requested: Iterable[str]) -> list[str]:
    """Drafter specs to load: each `--drafter` value (comma-separated lists
    allowed, preset names meaning their drafter), else the target's default
    drafter and prompt lookup, each at fixed lengths and with the automatic one."""
    specs = [part.strip() for value in requested for part in value.split(",") if part.strip()]
    if not specs:
        default = resolve_drafter(None, target).source
        specs = [default, f"{default}+{AUTO}", NGRAM, f"{NGRAM}+{AUTO}"]
    resolved = [resolve_drafter(base, target).source + suffix for base, suffix, _ in map(split_variant, specs)]
    return list(dict.fromkeys(resolved))  # dedupe, keep order


def split_variant(spec: str) -> tuple[str, str, DraftPolicy]:
    """("drafter", "+adaptive+pmin=0.5", DraftPolicy(adaptive=True, p_min=0.5)); ("drafter", "",
    DraftPolicy(num_draft=START_DRAFT)) without suffixes; num_draft None with +auto. The suffix
    starts at the first + of the spec's last path component."""
    folder, slash, name = spec.rpartition("/")
    base, plus, text = name.partition("+")
    if not plus:
        return spec, "", DraftPolicy()
    policy = policy_text(text)
    if not policy and all(word.strip().lower() in PROMPT_WORDS for word in text.split("+")):  # the default policy
        return folder + slash + base, plus + text, DraftPolicy()
    return folder + slash + base, plus + text, DraftPolicy.parse(policy)


def policy_text(text: str) -> str:
    """A suffix's parts but the prompt words (+prediction, +schema): what `DraftPolicy` reads."""
    return "+".join(word for word in text.split("+") if word.strip().lower() not in PROMPT_WORDS)


def has_word(suffix: str, word: str) -> bool:
    """Whether a variant's suffix holds one of the prompt words (+prediction, +schema)."""
    return word in (part.strip().lower() for part in suffix[1:].split("+"))


def pins_length(suffix: str) -> bool:
    """Whether a variant's suffix sets its draft length (+k=N), whatever `--num-draft` says."""
    policy = policy_text(suffix[1:])
    return bool(policy) and read_parts(policy).get("num_draft", None) is not None


def load_lineup(target: str, specs: list[str], progress: Progress | None = None,
                placement: Placement = ONE_PROCESS) -> Lineup:
    """Check every pair before any weights load, then load the target once, and
    each drafter once (its variants share it); placed by `placement` (with ranks:
    this rank's shard of the target and, on rank 0 only, the drafters)."""
    split = [split_variant(spec) for spec in specs]
    loaded = load_models(target, [base for base, _, _ in split], progress, placement)
    names = [drafter.name + suffix for drafter, (_, suffix, _) in zip(loaded.drafters, split)]
    names = [n if names.count(n) == 1 else s for n, s in zip(names, specs)]  # keep them apart
    entrants = tuple(
        Entrant(name, spec, drafter, policy, pinned=pins_length(suffix), predicted=has_word(suffix, PREDICTION),
                constrained=has_word(suffix, SCHEMA))
        for name, spec, drafter, (_, suffix, policy) in zip(names, specs, loaded.drafters, split)
    )
    return Lineup(loaded.target, entrants, loaded.peers.lockstep())
