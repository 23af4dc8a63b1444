"""Per-prompt measurements summed into one row per mode, drafter, temperature
and draft length, with the ratios and the Leviathan prediction.

Rates are ratios of sums (total tokens / total decode seconds), so long
generations weigh what they cost rather than one prompt one vote. Beside that
total, the speed-up over the target alone is also the median of per-prompt
ratios with their spread (`ratios.py`): one slow prompt cannot move it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable, Sequence

from .calibrate import Calibration
from .leviathan import alpha_from_mean_accepted, predicted_speedup
from .plan import MLX_LM_SPEC, TARGET
from .ratios import prompt_ratios
from .runs import Measurement


@dataclass(frozen=True)
class Row:
    mode: str
    drafter: str
    temp: float
    num_draft: int | None  # None: chosen each round
    prompts: int
    tokens: int
    decode_s: float
    rounds: int
    drafted: int
    accepted: int
    tokens_per_s: float
    mean_accepted: float  # tokens per round (target forward)
    acceptance_rate: float | None  # accepted / drafted; None when nothing was drafted
    s_per_round: float
    split_per_round: tuple[float, float, float] | None  # draft, verify, other seconds (--profile)
    same_as_target: int | None  # prompts whose tokens equal the target's (temperature 0 only)
    speedup: float | None  # total tokens/s over the target alone's, same temperature
    vs_mlx_lm: float | None  # tokens/s over mlx-lm-spec's, same drafter, temperature, k
    alpha: float | None
    cost_ratio: float | None
    predicted_speedup: float | None
    fixed_length: bool = True  # num_draft drafts every round: Leviathan's formula applies
    verify_ratio: float | None = None  # a forward of k+1 tokens over one of 1 token, calibrated
    median_speedup: float | None = None  # the median per-prompt speed-up over the target alone: the headline
    min_speedup: float | None = None  # the lowest per-prompt speed-up over the target alone
    min_prompt: str | None = None  # ... and its prompt (the worst)
    max_speedup: float | None = None  # the highest per-prompt speed-up
    max_prompt: str | None = None  # ... and its prompt
    prompt_speedups: tuple[tuple[str, float], ...] = ()  # (prompt id, speed-up), in the order run
    mean_chosen: float | None = None  # specmlx: mean chosen draft length per round
    plain_share: float | None = None  # specmlx: rounds that proposed nothing, over all rounds
    prediction_drafted: int | None = None  # +prediction: tokens copied from the prompts' predictions
    prediction_accepted: int | None = None  # ... and accepted
    forward_s_per_round: float | None = None  # a round's forwards, as calibrated: drafter steps and the verify
    host_s_per_round: float | None = None  # s_per_round less its forwards: what a round costs beyond them
    host_steps: float | None = None  # host_s_per_round in target steps (the target alone's s_per_round)

    def to_dict(self) -> dict:
        out = {name: getattr(self, name) for name in self.__dataclass_fields__}
        split = self.split_per_round
        out["split_per_round"] = None if split is None else dict(zip(("draft_s", "verify_s", "other_s"), split))
        out["prompt_speedups"] = dict(self.prompt_speedups)
        return out


def _key(m: Measurement | Row) -> tuple[str, str, float, int | None]:
    return (m.mode, m.drafter, m.temp, m.num_draft)


def _split(group: Sequence[Measurement]) -> tuple[float, float, float] | None:
    splits = [m.split for m in group if m.split is not None]
    rounds = sum(s.rounds for s in splits)
    if len(splits) != len(group) or rounds == 0:
        return None
    return (sum(s.draft_s for s in splits) / rounds, sum(s.verify_s for s in splits) / rounds,
            sum(s.other_s for s in splits) / rounds)


def _same_as_target(group: Sequence[Measurement], reference: dict[str, tuple[int, ...]]) -> int | None:
    if group[0].temp != 0 or group[0].mode == TARGET or not reference:
        return None
    return sum(reference.get(m.prompt_id) == m.tokens for m in group)


def _references(measurements: Sequence[Measurement]) -> dict[tuple[bool, float], dict[str, tuple[int, ...]]]:
    """What each run's tokens must equal, by (constrained, temperature): the target alone's, and under a
    schema the target's alone under it (the run that drafts nothing: plain constrained decoding)."""
    out: dict[tuple[bool, float], dict[str, tuple[int, ...]]] = {}
    for m in measurements:
        if m.mode == TARGET or m.constrained and m.num_draft == 0:
            out.setdefault((m.constrained, m.temp), {})[m.prompt_id] = m.tokens
    return out


def _per_prompt(group: Sequence[Measurement], target: dict[str, Measurement]) -> dict:
    """The row's per-prompt speed-ups over the target alone: median, spread and each prompt's."""
    ratios = prompt_ratios(group, target)
    if ratios is None:
        return {}
    (low, low_prompt), (high, high_prompt) = ratios.lowest, ratios.highest
    return dict(median_speedup=ratios.median, min_speedup=low, min_prompt=low_prompt, max_speedup=high,
                max_prompt=high_prompt, prompt_speedups=ratios.by_prompt)


def _choices(group: Sequence[Measurement]) -> tuple[float, float] | None:
    """Mean chosen draft length and the share of rounds that proposed nothing (specmlx runs)."""
    histogram = [0] * max((len(m.draft_histogram) for m in group), default=0)
    for m in group:
        for k, count in enumerate(m.draft_histogram):
            histogram[k] += count
    rounds = sum(histogram)
    if rounds == 0:
        return None
    return sum(k * c for k, c in enumerate(histogram)) / rounds, sum(m.plain_rounds for m in group) / rounds


def _base_row(group: Sequence[Measurement], reference: dict[str, tuple[int, ...]]) -> Row:
    first = group[0]
    tokens = sum(m.generated for m in group)
    decode_s = sum(m.decode_s for m in group)
    rounds = sum(m.rounds for m in group)
    drafted = sum(m.drafted for m in group)
    accepted = sum(m.accepted for m in group)
    return Row(
        mode=first.mode, drafter=first.drafter, temp=first.temp, num_draft=first.num_draft,
        prompts=len(group), tokens=tokens, decode_s=decode_s, rounds=rounds, drafted=drafted,
        accepted=accepted, tokens_per_s=tokens / decode_s if decode_s > 0 else 0.0,
        mean_accepted=sum(m.round_tokens for m in group) / rounds if rounds else 0.0,
        acceptance_rate=accepted / drafted if drafted else None,
        s_per_round=decode_s / rounds if rounds else 0.0, split_per_round=_split(group),
        same_as_target=_same_as_target(group, reference), speedup=None, vs_mlx_lm=None,
        alpha=None, cost_ratio=None, predicted_speedup=None, fixed_length=first.fixed_length,
        prediction_drafted=_total(m.prediction_drafted for m in group),
        prediction_accepted=_total(m.prediction_accepted for m in group),
    )


def _total(counts: Iterable[int | None]) -> int | None:
    """The sum of the counts a run kept; None if none kept it."""
    kept = [c for c in counts if c is not None]
    return sum(kept) if kept else None



def round_forwards(m: Measurement, calibration: Calibration) -> float | None:
    """Seconds of calibrated forwards a generation's rounds ran: its drafter steps, and a verify
    (a plain step at 1 row) per round at that round's width; None where a figure is missing."""
    if m.drafter_steps is None or not m.drafted_histogram:
        return None
    drafter = calibration.drafter_forward(m.drafter) if m.drafter_steps else 0.0
    verifies = [calibration.forward_s(drafted + 1) for drafted, n in enumerate(m.drafted_histogram) if n]
    if drafter is None or None in verifies:
        return None
    counts = [n for n in m.drafted_histogram if n]
    return m.drafter_steps * drafter + sum(n * v for n, v in zip(counts, verifies))


def host_work(group: Sequence[Measurement], calibration: Calibration | None) -> tuple[float, float] | None:
    """A round's forwards and its host work (what it cost beyond them), in seconds a round."""
    forwards = [round_forwards(m, calibration) for m in group] if calibration is not None else [None]
    rounds = sum(m.rounds for m in group)
    if None in forwards or rounds == 0:
        return None
    total = sum(forwards)
    return total / rounds, (sum(m.decode_s for m in group) - total) / rounds


def _ratio(a: float, b: float | None) -> float | None:
    return a / b if b else None


def summarize(measurements: Sequence[Measurement], calibration: Calibration | None) -> list[Row]:
    """One row per (mode, drafter, temp, num_draft), in the order first run."""
    groups: dict[tuple, list[Measurement]] = {}
    for m in measurements:
        groups.setdefault(_key(m), []).append(m)
    targets: dict[float, dict[str, Measurement]] = {}  # temperature -> prompt id -> the target alone
    for m in measurements:
        if m.mode == TARGET:
            targets.setdefault(m.temp, {})[m.prompt_id] = m
    references = _references(measurements)
    rows = [_base_row(g, references.get((g[0].constrained, g[0].temp), {})) for g in groups.values()]
    per_prompt = {_key(g[0]): _per_prompt(g, targets.get(g[0].temp, {})) for g in groups.values()}
    choices = {_key(g[0]): _choices(g) for g in groups.values()}
    hosts = {_key(g[0]): host_work(g, calibration) for g in groups.values()}
    target_tps = {r.temp: r.tokens_per_s for r in rows if r.mode == TARGET}
    target_step = {r.temp: r.s_per_round for r in rows if r.mode == TARGET}  # the pipelined step
    mlx_tps = {(r.drafter, r.temp, r.num_draft): r.tokens_per_s for r in rows if r.mode == MLX_LM_SPEC}
    out = []
    for row in rows:
        updates = {}
        if hosts[_key(row)] is not None:
            updates["forward_s_per_round"], updates["host_s_per_round"] = hosts[_key(row)]
            updates["host_steps"] = _ratio(updates["host_s_per_round"], target_step.get(row.temp))
        if row.mode != TARGET:
            updates["speedup"] = _ratio(row.tokens_per_s, target_tps.get(row.temp))
            updates.update(per_prompt[_key(row)])
            if choices[_key(row)] is not None:
                updates["mean_chosen"], updates["plain_share"] = choices[_key(row)]
            if row.mode != MLX_LM_SPEC:
                updates["vs_mlx_lm"] = _ratio(row.tokens_per_s, mlx_tps.get((row.drafter, row.temp, row.num_draft)))
            # Leviathan's formula assumes k drafts every round; adaptive and p-min runs vary it.
            if row.num_draft and row.fixed_length:
                updates["alpha"] = alpha_from_mean_accepted(row.mean_accepted, row.num_draft)
                c = calibration.cost_ratio(row.drafter) if calibration is not None else None
                v = calibration.verify_ratio(row.num_draft + 1) if calibration is not None else None
                if c is not None:
                    updates["cost_ratio"], updates["verify_ratio"] = c, v
                    updates["predicted_speedup"] = predicted_speedup(updates["alpha"], row.num_draft, c,
                                                                     1.0 if v is None else v)
        out.append(replace(row, **updates))
    return out
