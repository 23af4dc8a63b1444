"""A row on the automatic length that joins others has its shared drafter fed its prompt only
once it drafts or probes: under a load that compute binds it never does, and its first token
does not wait for that prefill. When it does draft, its drafter catches up on its own first."""

from __future__ import annotations

from specmlx.batch import Batch, Member
from specmlx.caches.stream import make_cache
from tests.test_golden_generations import POLICIES, PROMPT, collect, engine_for, models

from .test_batch import config
from .test_load_aware import Known


def compute_bound() -> Batch:
    """A batch where a wider forward costs in proportion: with more than one row, none drafts."""
    target = models().target
    batch = Batch(target, len(make_cache(target)), max_rows=4)
    batch.costs = Known(lambda positions: 0.05 * positions)
    return batch


def automatic(prompt: list[int], max_tokens: int) -> Member:
    return Member(engine_for("model", POLICIES["auto"]), prompt, config(0.0, "auto", max_tokens))


def held(batch: Batch, member: Member) -> int:
    """How many tokens of `member`'s context its drafter holds, in its group or on its own."""
    for group in batch.shared.values():
        if member in group.rows:
            return group.cache.lengths[group.rows.index(member)]
    return member.engine.drafter.cache.length


def test_a_row_admitted_under_load_that_never_drafts_never_prefills_its_drafter():
    batch = compute_bound()
    first, *later = members = [automatic(PROMPT, max_tokens=6) for _ in range(3)]
    for m in members:
        batch.add(m)
    for _ in range(3):
        assert all(event.num_draft == 0 and event.probe is None for _, event in batch.step())
    assert held(batch, first) == len(PROMPT) - 1  # the first joined an empty batch: prefilled
    assert [held(batch, m) for m in later] == [0, 0] and batch.deferred == later
    while batch.members:
        batch.step()
    # Its slot's next turn, alone, feeds the drafter what it skipped: the text a fresh engine gives.
    follow_up = later[0].tokens + [7, 7, 2]
    want = collect(engine_for("model", POLICIES["auto"]), follow_up, config(0.0, "auto", 12))["tokens"]
    assert collect(later[0].engine, follow_up, config(0.0, "auto", 12))["tokens"] == want


def test_a_deferred_row_that_drafts_catches_up_alone_and_commits_what_it_commits_alone():
    """The other row leaves early; the deferred row, then alone, drafts on its own schedule."""
    batch = compute_bound()
    batch.add(automatic(PROMPT[:9], max_tokens=4))
    row = automatic(PROMPT, max_tokens=40)
    batch.add(row)
    assert held(batch, row) == 0
    tokens, planned, fed = [], [], None
    while batch.members:
        waiting = row in batch.deferred
        for m, event in batch.step():
            if m is row:
                tokens += [t.token for t in event.tokens]
                planned.append(event.num_draft)
        if waiting and row not in batch.deferred:  # its first round drafting or probing
            fed = next(group.fed for group in batch.shared.values() if row in group.rows)
            assert held(batch, row) == len(row.tokens) - 1
    assert planned[0] == 0 and any(planned)  # it waited, then drafted
    assert fed == 1  # caught up before it: the group's forward fed it its last token alone
    assert tokens == collect(engine_for("model", POLICIES["auto"]), PROMPT, config(0.0, "auto"))["tokens"]


def test_a_deferred_row_does_not_probe_where_the_others_do():
    """Drafting would pay were drafts accepted, but this drafter's are not: rows probe now and
    then. A deferred row's probe would first feed its drafter the whole prompt, so it waits."""
    target = models().target
    batch = Batch(target, len(make_cache(target)), max_rows=4)
    batch.costs = Known(lambda positions: 0.4 + 0.001 * positions)  # a wider forward nearly free
    members = [automatic(PROMPT, max_tokens=20) for _ in range(3)]
    for m in members:
        for _ in range(30):
            m.auto.acceptance.update(4, 0)
        m.hit = True  # a probe is due at once
        batch.add(m)
    first, *later = members
    probed = {id(m): 0 for m in members}
    for _ in range(3):
        for m, event in batch.step():
            assert event.num_draft == 0
            probed[id(m)] += event.probe is not None
    assert probed[id(first)] > 0 and [probed[id(m)] for m in later] == [0, 0]
    assert batch.deferred == later and [held(batch, m) for m in later] == [0, 0]


def test_a_deferred_row_drafts_only_at_a_size_where_drafting_was_measured():
    """A wider forward nearly free and a drafter always right: every row would draft. At a size
    not yet measured drafting, a deferred row does not pay its prompt's prefill to try it."""
    target = models().target
    batch = Batch(target, len(make_cache(target)), max_rows=4)
    batch.costs = Known(lambda positions: 0.4 + 0.001 * positions)
    members = [automatic(PROMPT, max_tokens=30) for _ in range(3)]
    for m in members:
        for _ in range(30):
            m.auto.acceptance.update(4, 4)
        batch.add(m)
    first, *later = members
    planned = {id(m): event.num_draft for m, event in batch.step()}
    assert planned[id(first)] > 0 and [planned[id(m)] for m in later] == [0, 0] and batch.deferred == later
    batch.costs.step[len(members)] = 0.05  # as a round drafting at this size measures it
    planned = {id(m): event.num_draft for m, event in batch.step()}
    assert all(planned[id(m)] > 0 for m in members) and not batch.deferred
