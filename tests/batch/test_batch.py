"""A batch serves each row as that request alone would be served.

The golden cases (`tests/test_golden_generations.py`: every drafter kind x
T=0 and T=0.8 x four policies, each served alone) are put in one batch per
target, joining a few rounds apart, so rows join and leave while others are
mid-generation, with mixed drafters, sampling settings and draft lengths.
Each row must produce its golden tokens:

- at T=0 for every policy: greedy verification commits the target's argmax
  whatever was proposed, so the automatic length, which in a batch is chosen
  for the batch (`schedule.load`), changes the rounds but not the text;
- at T=0.8 for the fixed, adaptive and p-min policies: the same seed, the
  same key split and the same draft lengths give the same text, and then the
  same rounds (sources and counts) too.

Under OpenBLAS a row's floats in a batch can differ from alone by a few ULPs
(`test_cache.py`, about 1e-6), so a near-tie could flip a token; none of these
is near: along the greedy text the targets' smallest top-two logit gap is
0.03 (qwen2, position 27) and 0.015 (Gemma 4, position 22), as a test checks.
Negative controls show the check has teeth: a cache that rewinds every row
by the same amount (the least or the most any row drops) changes outputs.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from unittest import mock

import mlx.core as mx
import pytest

from specmlx.batch import Batch, Member
from specmlx.caches.batch import BatchCache
from specmlx.caches.stream import make_cache
from specmlx.engine import GenerationConfig
from specmlx.sampling import SamplingParams
from specmlx.schedule.load import choose
from tests.test_golden_generations import (CASES, MAX_TOKENS, POLICIES, PROMPT, SEED, STATS, TEMPERATURES,
                                           collect, engine_for, load_golden, models)

# The least top-two logit gap the greedy cases may have: ten thousand times a batch's drift from alone.
MIN_LOGIT_GAP = 0.01

DRAFTERS = {"qwen2": ("model", "mtp", "lookup", "none"), "gemma4": ("gemma4-assistant",)}
JOIN_EVERY = {"qwen2": 2, "gemma4": 6}  # rounds between joins: the last rows join after the first left
# Counts a batched row shares with its golden run when its draft lengths are its own. Timed rounds
# are the batch's: a round is timed apart for every row when one row's plan asks for it.
SAME_ROUNDS = tuple(s for s in STATS if s != "timed_rounds")
# Rows of different lengths (the first: a one-token prompt, an empty cache after prefill).
PREFIXES = [(1, 0.0, "fixed-4"), (6, 0.8, "fixed-4"), (17, 0.0, "auto"), (29, 0.8, "adaptive-3"),
            (40, 0.0, "pmin-0.3-lookup-2"), (11, 0.0, "adaptive-3"), (3, 0.8, "pmin-0.3-lookup-2"),
            (23, 0.0, "fixed-4")]


def config(temp: float, policy: str, max_tokens: int = MAX_TOKENS) -> GenerationConfig:
    return GenerationConfig(max_tokens=max_tokens, sampling=SamplingParams(temp=temp), policy=POLICIES[policy],
                            seed=SEED)


def target_of(kind: str):
    return models().g4_target if kind == "gemma4" else models().target


def greedy_logit_gaps(kind: str) -> list[float]:
    """At each step of the target's greedy text (the golden T=0 tokens), its best logit less its second."""
    name = "gemma4-assistant T=0.0 fixed-4" if kind == "gemma4" else "model T=0.0 fixed-4"
    greedy = load_golden()["cases"][name]["tokens"]
    logits = target_of(kind)(mx.array(PROMPT + greedy[:-1])[None])[0, len(PROMPT) - 1 :].astype(mx.float32)
    assert mx.argmax(logits, axis=-1).tolist() == greedy  # these are the steps the batch must not flip
    top_two = mx.sort(logits, axis=-1)[:, -2:]
    return (top_two[:, 1] - top_two[:, 0]).tolist()


@pytest.mark.parametrize("kind", DRAFTERS)
def test_no_greedy_step_is_a_near_tie(kind):
    """What the T=0 equality below rests on: a few ULPs of difference cannot flip a greedy token."""
    gaps = greedy_logit_gaps(kind)
    assert min(gaps) >= MIN_LOGIT_GAP, f"position {gaps.index(min(gaps))}: gap {min(gaps):.2e}"


@dataclass
class Served:
    """What a batch served: each member's tokens and sources, each round's planned lengths."""

    tokens: dict[int, list[int]] = field(default_factory=dict)
    sources: dict[int, list[str]] = field(default_factory=dict)
    planned: list[list[int]] = field(default_factory=list)
    most: int = 0  # rows at once, at most
    rejoined: bool = False  # a row joined after another had left
    chosen: list[list[int]] = field(default_factory=list)  # each round's load-aware lengths, if chosen


def serve(target, members: list[Member], join_every: int) -> Served:
    """Run `members` in one batch, one joining every `join_every` rounds, until all have finished."""
    batch = Batch(target, len(make_cache(target)), max_rows=len(members))
    out, waiting, index, rounds = Served(), list(members), {id(m): i for i, m in enumerate(members)}, 0
    while waiting or batch.members:
        if waiting and rounds % join_every == 0:
            out.rejoined = out.rejoined or any(m.finish for m in members)
            batch.add(waiting.pop(0))
        out.most = max(out.most, len(batch.members))
        events = batch.step()
        out.planned.append([event.num_draft for _, event in events])
        for m, event in events:
            out.tokens.setdefault(index[id(m)], []).extend(t.token for t in event.tokens)
            out.sources.setdefault(index[id(m)], []).extend(t.source.value for t in event.tokens)
        rounds += 1
    return out


def golden_rows(kind: str) -> list[tuple[str, str, float, str]]:
    """The target's golden cases, (name, drafter, temperature, policy), in an order that mixes drafters."""
    rows = [(f"{d} T={t} {p}", d, t, p) for t in TEMPERATURES for p in POLICIES for d in DRAFTERS[kind]]
    assert {name for name, *_ in rows} <= set(CASES)
    return rows


@functools.cache
def served_golden(kind: str) -> tuple[list[Member], Served]:
    """The golden rows served together; the batch's load-aware choices are watched, not changed."""
    members = [Member(engine_for(d, POLICIES[p]), PROMPT, config(t, p)) for _, d, t, p in golden_rows(kind)]
    chosen = []

    def watched(lanes, verify):
        chosen.append(choose(lanes, verify))
        return chosen[-1]

    with mock.patch("specmlx.batch.batch.choose", watched):
        served = serve(target_of(kind), members, JOIN_EVERY[kind])
    served.chosen = chosen
    return members, served


def counts(stats, names=SAME_ROUNDS) -> dict:
    return {n: list(v) if isinstance(v, tuple) else v for n in names for v in [getattr(stats, n)]}


def first_difference(got: list, want: list) -> int | None:
    if got == want:
        return None
    return next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))


@pytest.mark.parametrize("kind", DRAFTERS)
def test_every_row_of_a_batch_commits_its_golden_tokens(kind):
    golden = load_golden()["cases"]
    members, served = served_golden(kind)
    differ = {}
    for i, (name, _, temp, policy) in enumerate(golden_rows(kind)):
        if temp == 0.0 or not members[i].auto:  # an automatic row's sampled text follows its lengths
            at = first_difference(served.tokens[i], golden[name]["tokens"])
            if at is not None:
                differ[name] = (at, served.tokens[i][at : at + 4], golden[name]["tokens"][at : at + 4])
    assert not differ, f"rows that differ from alone (index, batch, golden): {differ}"


@pytest.mark.parametrize("kind", DRAFTERS)
def test_a_row_with_its_own_lengths_runs_the_rounds_it_runs_alone(kind):
    golden = load_golden()["cases"]
    members, served = served_golden(kind)
    for i, (name, _, temp, policy) in enumerate(golden_rows(kind)):
        if policy == "auto" and members[i].auto:  # the batch chooses its lengths: only its length is the same
            assert counts(members[i].stats, ("generation_tokens", "finish_reason")) == {
                "generation_tokens": MAX_TOKENS, "finish_reason": "length"}, name
            continue
        assert served.sources[i] == golden[name]["sources"], name
        assert counts(members[i].stats) == {n: golden[name]["stats"][n] for n in SAME_ROUNDS}, name


@pytest.mark.parametrize("kind", DRAFTERS)
def test_the_golden_batch_mixes_rows_lengths_and_joins(kind):
    """What the equality above is worth: many rows at once, rows joining after others left,
    different lengths in one round, and automatic rows drafting the batch's choice, otherwise
    than alone."""
    golden = load_golden()["cases"]
    members, served = served_golden(kind)
    assert served.most >= 4 and served.rejoined
    assert any(len({k for k in ks if k}) >= 2 for ks in served.planned)
    assert any(len(ks) >= 2 and any(ks) for ks in served.chosen)
    rows = golden_rows(kind)
    assert any(members[i].auto and members[i].stats.drafted != golden[name]["stats"]["drafted"]
               for i, (name, *_) in enumerate(rows))


@pytest.mark.parametrize("kind", DRAFTERS)
def test_every_row_counts_the_host_syncs_it_made(kind):
    """A round timed apart syncs once more: host syncs are rounds plus timed rounds, as alone."""
    members, _ = served_golden(kind)
    assert any(m.stats.timed_rounds for m in members)  # automatic rows time their drafting now and then
    for m in members:
        assert m.stats.host_syncs == m.stats.rounds + m.stats.timed_rounds


def prefix_members(kind: str) -> tuple[list[Member], list[list[int]]]:
    """Rows of different prompt lengths, and what each produces served alone."""
    drafters = DRAFTERS[kind]
    rows = [(drafters[i % len(drafters)], t, p, PROMPT[:n]) for i, (n, t, p) in enumerate(PREFIXES)]
    alone = [collect(engine_for(d, POLICIES[p]), prompt, config(t, p))["tokens"] for d, t, p, prompt in rows]
    return [Member(engine_for(d, POLICIES[p]), prompt, config(t, p)) for d, t, p, prompt in rows], alone


@pytest.mark.parametrize("kind", DRAFTERS)
def test_rows_of_different_lengths_commit_what_they_commit_alone(kind):
    members, alone = prefix_members(kind)
    served = serve(target_of(kind), members, join_every=1)
    assert served.most == len(PREFIXES)
    differ = {i: first_difference(served.tokens[i], want) for i, want in enumerate(alone)}
    assert not {i: at for i, at in differ.items() if at is not None}, f"rows: prompt length, {PREFIXES}"


def test_dropping_the_padding_every_row_has_mid_batch_changes_no_row(monkeypatch):
    """Compaction at every round that leaves every row padded (`COMPACT_AT` is 256 positions)."""
    monkeypatch.setattr("specmlx.caches.batch.COMPACT_AT", 1)
    members, alone = prefix_members("qwen2")
    served = serve(target_of("qwen2"), members, join_every=1)
    assert all(served.tokens[i] == want for i, want in enumerate(alone))


def test_a_rows_stop_tokens_end_that_row_alone():
    """A fill-in-the-middle row's end tokens end it, committed and not emitted, as eos would; its
    neighbour, with the same prompt and none, goes on to its golden end."""
    golden = load_golden()["cases"]["model T=0.0 fixed-4"]["tokens"]
    stop = golden[11]
    cut = golden.index(stop)
    stopped = Member(engine_for("model", POLICIES["fixed-4"]), PROMPT,
                     dataclasses.replace(config(0.0, "fixed-4"), stop_tokens={stop}))
    plain = Member(engine_for("model", POLICIES["fixed-4"]), PROMPT, config(0.0, "fixed-4"))
    served = serve(target_of("qwen2"), [stopped, plain], join_every=1)
    assert served.tokens[0] == golden[:cut] and stopped.stats.finish_reason == "eos"
    assert stopped.tokens[-1] == stop
    assert served.tokens[1] == golden and plain.stats.finish_reason == "length"


@pytest.mark.parametrize("name", CASES)
def test_a_batch_of_one_is_the_generation_alone(name):
    """Alone in a batch, a row plans with its own schedule and learns from its own rounds' times."""
    golden = load_golden()["cases"][name]
    drafter, temp, policy = name.split(" ")
    member = Member(engine_for(drafter, POLICIES[policy]), PROMPT, config(float(temp[2:]), policy))
    served = serve(target_of("gemma4" if drafter == "gemma4-assistant" else "qwen2"), [member], join_every=1)
    assert served.tokens[0] == golden["tokens"]
    assert served.sources[0] == golden["sources"]
    assert counts(member.stats, STATS) == golden["stats"]


@pytest.mark.parametrize("leaves", ["finished", "removed"])
@pytest.mark.parametrize("drafter", ["model", "mtp", "gemma4-assistant"])
def test_a_row_that_leaves_hands_its_conversation_back_to_its_slot(drafter, leaves):
    """Its next turn, on the slot's engine, reuses the rows the batch handed back, as if never batched."""
    kind = "gemma4" if drafter == "gemma4-assistant" else "qwen2"
    engine = engine_for(drafter, POLICIES["fixed-4"])
    member = Member(engine, PROMPT[:20], config(0.0, "fixed-4", 12))
    batch = Batch(target_of(kind), len(make_cache(target_of(kind))))
    batch.add(Member(engine_for(drafter, POLICIES["fixed-4"]), PROMPT[:9], config(0.8, "fixed-4", 60)))
    batch.step()
    batch.add(member)
    for _ in range(3 if leaves == "removed" else MAX_TOKENS):
        if member in batch.members:
            batch.step()
    if member in batch.members:
        batch.remove(member)
    assert member.stats.finish_reason == ("cancelled" if leaves == "removed" else "length")
    assert engine.cache_length() == len(member.tokens) - 1  # all it committed but the pending last token
    turn = member.tokens + [3, 5, 7]
    want = collect(engine_for(drafter, POLICIES["fixed-4"]), turn, config(0.8, "fixed-4", 20))
    assert collect(engine, turn, config(0.8, "fixed-4", 20)) == want


def rewind_every_row_by(pick):
    """A broken `BatchCache.keep`: every row drops `pick` of what the rows should drop (no per-row roll)."""
    def keep(self: BatchCache, lengths) -> None:
        drop = pick([self.size - self.padding[i] - n for i, n in enumerate(lengths)])
        for layer in self.layers:
            layer.trim(drop)
        self.size -= drop
        self.lengths = list(lengths)
    return keep


@pytest.mark.parametrize("pick", [min, max])
def test_a_cache_that_rewinds_every_row_alike_breaks_the_equality(monkeypatch, pick):
    """Negative control: with one rewind for all rows, rows that drop more (min) keep stale drafts, or rows
    that drop less (max) lose committed tokens, and what they commit differs from alone."""
    members, alone = prefix_members("qwen2")
    monkeypatch.setattr(BatchCache, "keep", rewind_every_row_by(pick))
    served = serve(target_of("qwen2"), members, join_every=1)
    differ = [i for i, want in enumerate(alone) if served.tokens[i] != want]
    assert len(differ) >= 2, f"only rows {differ} differ from alone"
