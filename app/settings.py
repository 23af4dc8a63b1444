"""What the next answer is generated with; changed on the settings screen."""

from __future__ import annotations

from dataclasses import dataclass

from specmlx.drafters import NGRAM, NONE, SUFFIX
from specmlx.engine import GenerationConfig
from specmlx.errors import SpecmlxError
from specmlx.policy import START_DRAFT, DraftPolicy
from specmlx.sampling import SamplingParams

BUILTIN_LABELS = {NGRAM: "prompt lookup", SUFFIX: "suffix lookup (this session)", NONE: "none (plain decoding)"}


def read_policy(text: str) -> DraftPolicy:
    """The settings field's draft policy (`DraftPolicy`'s grammar: `4`, `auto`...), of which
    a chat sets the length alone: any other part is refused, not dropped."""
    policy = DraftPolicy.parse(text)
    if policy != DraftPolicy(num_draft=policy.num_draft):
        raise SpecmlxError(f'draft policy "{text}": a chat sets only the draft length ({START_DRAFT}, auto...)')
    return policy


def drafter_label(name: str) -> str:
    """What the screen calls a drafter: its own name, or what prompt lookup and none do."""
    return BUILTIN_LABELS.get(name, name)


@dataclass(frozen=True)
class ChatSettings:
    """Sampling and speculation for the next answer.

    `drafter` is a drafter's name (`Drafter.name`); None means the one the
    models were loaded with. `speculation=False` decodes with no drafter but
    keeps `drafter`, so turning speculation back on restores the earlier
    choice. `policy` sets the draft length only: `num_draft` None ("auto") lets
    each round choose it from what this session measured.
    """

    temp: float = 0.0
    top_p: float = 1.0
    policy: DraftPolicy = DraftPolicy(num_draft=None)  # the automatic length, as generate and serve draft
    max_tokens: int = 1024
    drafter: str | None = None
    speculation: bool = True
    system: str = ""

    def __post_init__(self) -> None:
        self.generation_config()  # the engine's own checks, as one-line SpecmlxErrors

    @property
    def draft_label(self) -> str:
        """The draft policy as the settings field shows it (`DraftPolicy`'s grammar), e.g. `4` or `auto`."""
        return str(self.policy)

    @property
    def active_drafter(self) -> str | None:
        return self.drafter if self.speculation else NONE

    def generation_config(self, stop: tuple[str, ...] = ()) -> GenerationConfig:
        return GenerationConfig(
            max_tokens=self.max_tokens,
            sampling=SamplingParams(temp=self.temp, top_p=self.top_p),
            policy=self.policy,
            stop=stop,
        )
