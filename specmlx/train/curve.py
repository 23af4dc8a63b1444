"""How a head's acceptance grows with its training data: the learning curve.

Each point trains a head on the first N collected tokens (the same held-out
requests for all) and measures it as it will be used: greedy speculative
decoding through the engine, k drafted tokens a round, on held-out requests
it never saw. The figure is the engine's mean accepted length, tokens per
round including the target's own.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

from ..drafters.mtp import MTPDrafter
from ..errors import SpecmlxError
from ..engine import Engine, GenerationConfig
from ..loading import LoadedModel
from ..models.mtp import load_mtp
from ..policy import DraftPolicy
from ..prompting import PromptRow
from ..vocab import vocab_size
from .answers import prompt_tokens


@dataclass(frozen=True)
class Point:
    limit: int  # the token count asked for (--curve)
    tokens: int  # training tokens used: whole shards up to the limit (request and answer, no padding)
    steps: int
    mean_accepted: float  # the engine's tokens per round at `num_draft`, greedy, held out
    acceptance_rate: float  # accepted drafts / drafted
    agreement_1: float  # teacher-forced held-out agreement, first draft token
    agreement_2: float  # and later ones
    num_draft: int
    requests: int
    generated: int


def measure(target: LoadedModel, head_dir: Path, requests: Sequence[PromptRow], max_tokens: int,
            num_draft: int = 4) -> tuple[float, float, int]:
    """(mean accepted length, acceptance rate, tokens generated) of the head in `head_dir`."""
    # Dequantized, as `specmlx models fetch` expands a bundled head for the CPU backend.
    drafter = MTPDrafter(load_mtp(head_dir, dequantize=True), vocab_size(target.model))
    engine = Engine(target.model, drafter, tokenizer=target.tokenizer)
    rounds = accepted = drafted = generated = 0
    for request in requests:
        run = engine.generate(prompt_tokens(target.tokenizer, request),
                              GenerationConfig(max_tokens=max_tokens, policy=DraftPolicy(num_draft=num_draft)))
        for _ in run:
            pass
        rounds, accepted = rounds + run.stats.rounds, accepted + run.stats.accepted
        drafted, generated = drafted + run.stats.drafted, generated + run.stats.generation_tokens
        engine.forget(0)  # each request from an empty cache, as a new chat starts
    return (accepted + rounds) / max(rounds, 1), accepted / max(drafted, 1), generated


def save_points(points: list[Point], settings: dict, path: Path) -> None:
    path.write_text(json.dumps({"settings": settings, "points": [asdict(p) for p in points]}, indent=2) + "\n")


def load_points(path: Path, settings: dict) -> list[Point]:
    """Points an earlier run measured with the same `settings`; none if there is no curve yet."""
    try:
        saved = json.loads(path.read_text())
    except OSError:
        return []
    except ValueError:
        raise SpecmlxError(f"{path}: not a readable learning curve; move it away to start again") from None
    if saved.get("settings") != settings:
        changed = sorted(k for k in {*settings, *saved.get("settings", {})}
                         if settings.get(k) != saved.get("settings", {}).get(k))
        raise SpecmlxError(f"{path} was measured with other settings ({', '.join(changed)}); "
                           "use another --out, or the same settings to resume")
    return [Point(**row) for row in saved["points"]]


def plot(points: list[Point], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=120)
    xs = [p.tokens for p in points]
    ax.plot(xs, [p.mean_accepted for p in points], "o-", label=f"mean accepted length, k={points[0].num_draft}")
    ax.set_xscale("log")
    ax.set_xlabel("training tokens (requests and the target's answers)")
    ax.set_ylabel("tokens per round (held-out requests)")
    ax.set_ylim(1, points[0].num_draft + 1)
    ax.axhline(2.5, color="grey", linestyle=":", label="goal: 2.5")
    for p in points:
        ax.annotate(f"{p.mean_accepted:.2f}", (p.tokens, p.mean_accepted), textcoords="offset points",
                    xytext=(0, 6), ha="center", fontsize=8)
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
