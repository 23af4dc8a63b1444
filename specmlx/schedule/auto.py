"""The cost-aware draft length: each round drafts the k that maximises expected
tokens per second, as measured in this run.

For every k of the set of widths (`widths.py`) up to the limit, the controller
weighs the tokens a round of k is expected to commit (`acceptance.py`) against
what such a round costs here (`costs.py`, each verify width priced on its own)
and drafts the best. k = 0 is plain decoding: a drafter that is wrong too
often, or too slow for what it gets right, is not asked to draft.

While plain decoding wins, a plain round now and then probes the drafter: it
proposes one token, which is not verified, and the target's own distribution
at that position, computed anyway, says whether it would have been accepted.
A probe costs a drafter step, and its catching up on the tokens it skipped,
but no verify width. Probes are budgeted in time: their measured cost is owed
and each round repays `PROBE_BUDGET` of a plain round, so they spend at most
that share of the time, and a drafter as dear as the target is probed once in
a hundred rounds or less. A probe that would have been accepted, or a plain
round right after drafting, probes again at once while a run of accepted probes
affordable within `CHAIN_BUDGET` of a target step could tip the choice to
drafting: a cheap drafter whose text turned easy (code after prose, a copied
block), or that had a bad streak, is soon drafting again, and nothing drafts
on hope alone (drafting below break-even is what made the unbounded head slow).

A drafter right one time in six or less over its last few dozen tries gives up
(`acceptance.Record`): it drafts nothing, whatever the costs say, until its probes
bring its record back to one in four, and it probes once in `RARE_EVERY` plain
rounds at most; an accepted probe still starts a run of probes, so text it turns good at (a copied block) is drafted again within a few
rounds. A new answer (`begin`) weighs the last ones' record as a few tries: prompt
lookup right on code it copied soon gives up on prose. Drafting that runs slower a
token than plain rounds by the clock gives up the same way (`realized.py`). A drafter left out of two rounds or more first catches up on the tokens it
skipped, and a round that would draft then is charged that catching up (as a probe
measures it): a drafter that only just pays does not start a run on it.

A plain round is priced as one in a run of them costs. Where a plain round starts
the next one's forward (a look-ahead, `generation.overlaps`: one process), that
hides the host's work of a round, and the plain rounds that measure costs are
those after one: a plain round right after drafting, or after a guess of drafting,
has none (1.2 of one after a look-ahead here, the real pair), and priced by it a
run of plain rounds looked dearer than it is: a drafter right one time in five
drafted at 0.92x the target. Nor is a generation's first round a measure (it
ran 1.7 plain rounds here).

A fresh controller calibrates on its first rounds: `CALIBRATION` plain rounds,
then probes until `CALIBRATION_PROBES` are answered, or until one shows that no
draft could pay even if always right (a drafter as dear as the target: it costs
one probe and no verify width). Plain rounds cost what the target alone does;
the probes time a drafter step (`costs.py`) and tell its acceptance before any
draft. Drafts then widen one length of the set at a time past the widest
drafted so far (`_reach`): an untried width is guessed low (`costs.py`), and
where every scored row costs a step (this CPU under load), jumping to a wide
guess cost several target steps of a short answer. They are the
answer's own rounds and so never delay its first token.

The choice reads only finished rounds and wall times, never the pending
round's tokens: it fixes how many tokens are proposed before any is drawn,
and a probe's token is never proposed, so output stays exact at every
temperature. Wall times vary, so a seeded sampled run repeats its
distribution, not its text; a fixed draft length repeats the text.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

from ..events import draft_steps
from ..plan import Plan, Round
from .acceptance import Acceptance, expected_tokens
from .costs import CostEstimate, Costs
from .widths import after, within

PROBE_BUDGET = 0.01  # share of the time spent probing, in plain rounds a round
RARE_EVERY = 16  # plain rounds per probe, at least, for a drafter given up (`acceptance.Record`)
CHAIN_BUDGET = 2.0  # target steps a run of probes after an accepted one may spend to tip the choice
CHAIN_MAX = 8  # probes such a run looks ahead, at most
TIMED_EVERY = 8  # a drafting round in this many is timed apart, to follow the drafter's step cost
CALIBRATION = 2  # plain rounds of a fresh controller before its first probe: the one before the probe is in pace
CALIBRATION_PROBES = 3  # probes it answers before drafting, unless one shows that drafting cannot pay even if right
SLACK = 1e-9  # float sums of the budget that should meet it exactly do


@dataclass(frozen=True)
class AutoEstimate:
    """What the controller has measured: costs (None before any round) and the
    acceptance rate of each draft position given the one before."""

    costs: CostEstimate | None
    acceptance: tuple[float, ...]


class AutoDraft:
    def __init__(self, limit: int, start: int = 4, block: int = 0) -> None:
        """`limit`: the longest draft; `start`: the policy's start, which it reports and does not draft
        (its drafts widen from one, `_reach`); `block`: for a block drafter, the most one of its forwards
        proposes (`DraftsBlocks.proposals`), which bounds `limit`: a draft of k then costs one drafter
        step and a verify of k. 0 for a drafter that drafts a token a step."""
        self.block = block
        self.limit = min(limit, block) if block else limit
        self.acceptance = Acceptance(limit)
        self.costs = Costs()
        self.calibration = CALIBRATION + CALIBRATION_PROBES  # its rounds to run: plain, then probes until answered
        self.widest = 0  # the widest draft it has drafted: a draft widens one length of the set past it
        self.idle = 0  # rounds since the drafter last drafted or probed
        self.hit = False  # the last probe would have been accepted, or the last round drafted
        self.owed = 0.0  # probe time not yet repaid, in plain rounds
        self.drafting = 0  # rounds planned to draft with the drafter caught up, for the timed-apart cadence
        self._first = True
        self._opening = True  # the generation's first round, which measures nothing (`update`)
        self.looks_ahead = False  # whether a plain round has started the next one's forward here (`generation.overlaps`)
        self._behind = True  # whether the round running catches the drafter up first
        self._copied = False  # the last round committed a copy the drafter has not seen
        self._probing = False  # whether the round running probes

    def begin(self, limit: int) -> None:
        """A new generation: k at most `limit` (and a block); its first round catches the drafter up on the prompt."""
        self.limit = min(limit, self.block) if self.block else limit
        self.acceptance.grow(limit)
        self.acceptance.anew()
        self._first = self._opening = True
        self.costs.last = None  # a prefill lies between the last answer's rounds and this one's

    @property
    def probe_every(self) -> int:
        """Plain rounds per probe, as the budget pays for a probe's measured cost; for a drafter given
        up, `RARE_EVERY` at least: a probe that seems free (a cheap head's step is within the noise of
        a plain round's time) would otherwise probe every round, and forgo every round's look-ahead."""
        every = max(math.ceil(self.costs.probe / PROBE_BUDGET - SLACK), 1)
        return max(every, RARE_EVERY) if self.acceptance.gave_up else every

    def plan(self, room: int) -> Plan:
        """The next round, drafting at most `room` tokens."""
        cap = min(self.limit, room)
        calibrating = bool(self.calibration) and cap > 0
        # A drafter left out of two rounds or more, or not yet used in this generation, has tokens to catch up on.
        self._behind = self._first or self.idle >= 2 or self._copied
        k = 0 if calibrating or cap <= 0 else self._best(cap)
        timed = False
        if k > 0 and not self._behind:  # counted as planned: a draft that comes back empty still counts
            timed = not self.costs.timed or self.drafting % TIMED_EVERY == 0
            self.drafting += 1
        if calibrating:  # a probe counts once answered (`update`): one that proposed nothing runs again
            probe = self.calibration <= CALIBRATION_PROBES
            self.calibration -= not probe
        else:
            probe = k == 0 and cap > 0 and self._probes(cap)
        self._probing = probe
        self._first = self._first and not (k or probe)
        return Plan(k, timed, probe)

    def _probes(self, cap: int) -> bool:
        """Whether a plain round probes: when the budget has repaid the last probes, or after an
        accepted probe (or drafting) while a run of accepted probes it can afford could tip the choice."""
        if self.owed <= PROBE_BUDGET + SLACK and (self.idle + 1 >= RARE_EVERY or not self.acceptance.gave_up):
            return True
        if self.hit:  # the answer stands until a probe or a drafting round changes what is known
            step = self.costs.step
            run = CHAIN_MAX if step <= 0 else min(CHAIN_MAX, int(CHAIN_BUDGET / step))
            self.hit = run > 0 and _choose(self._accepted(run), self.costs, self._reach(cap), blocks=bool(self.block)) > 0
        return self.hit

    def _accepted(self, probes: int) -> Acceptance:
        """The acceptance as it would be after `probes` more probes that would have been accepted."""
        accepted = copy.deepcopy(self.acceptance)
        for _ in range(probes):
            accepted.observe_first(1.0)
        return accepted

    def likely_plain(self, room: int) -> bool:
        """Judged on what is measured so far, and for a probing round on its probe's best case:
        a plain round teaches little, but a probe that would have been accepted may tip the
        choice to drafting, and a drafting round after a guess of plain pays one forward more."""
        cap = min(self.limit, room)
        if cap <= 0 or self.calibration > 1:  # its next round calibrates: plain, or a probe
            return True
        acceptance = self._accepted(1) if self._probing else self.acceptance
        return _choose(acceptance, self.costs, self._reach(cap), blocks=bool(self.block)) == 0

    def update(self, done: Round, seconds: float) -> None:
        """The round planned last finished: `done`, in `seconds` of the engine's time."""
        self.owed = max(self.owed - PROBE_BUDGET, 0.0)
        self.looks_ahead = self.looks_ahead or done.ahead and not done.drafted
        measure = not (self._opening or self.looks_ahead and not (done.ahead or done.drafted))
        self._opening = False
        if done.probe is not None:  # its catching up included: that is what a probe costs
            if measure:
                self.costs.probed(seconds)
            self.owed = max(self.owed, self.costs.probe)  # the budget's turn comes a probe's cost after the last
            self.acceptance.observe_first(done.probe)
            self.hit = done.probe >= 0.5
            if self.calibration:  # answered: it ends once drafting cannot pay even if always right, or its probes are done
                always = _argmax([1.0] * self.limit, self.costs, self._reach(self.limit), blocks=bool(self.block))
                self.calibration = 0 if always == 0 else self.calibration - 1
        elif not measure or done.ahead and done.drafted:  # its forward scored one row fewer than its width
            self.costs.last = None
        elif not (self._behind and done.steps):  # catching up is no drafter step
            self.costs.update(seconds, done.steps, done.drafted, done.draft_s)
        if done.drafted:
            self.widest = max(self.widest, done.drafted)
        if done.probe is None and not done.looked_up:  # a copy from the context says nothing of the drafter
            self.acceptance.update(done.drafted, done.accepted)
            if done.drafted:  # it taught what a probe would; should plain decoding win next, a run of
                self.hit = True  # probes may follow at once: the drafter is caught up
                self.owed = max(self.owed, self.costs.probe)
        if done.steps:
            self.idle = 0
        else:
            self.idle += 1
        self._copied = done.looked_up and done.accepted > 0
        self._realize(done, seconds, measure)

    def _realize(self, done: Round, seconds: float, measure: bool) -> None:
        """Hold what drafting bought by the clock against plain rounds (`realized.py`)."""
        if not measure:
            return
        if not done.drafted:
            self.costs.realized.plain_round(seconds)
        elif not done.looked_up and self.costs.realized.drafting_round(seconds, len(done.tokens)):
            self.acceptance.give_up()

    def _best(self, cap: int) -> int:
        """The k of most tokens per second, as measured, among the widths it may try (`_reach`); a
        drafter behind pays its catching up first, as a probe does beyond its step."""
        catch_up = max(self.costs.probe - self.costs.step, 0.0) if self._behind else 0.0
        return _choose(self.acceptance, self.costs, self._reach(cap), catch_up, bool(self.block))

    def _reach(self, cap: int) -> int:
        """The longest draft it may plan: one length of the set past the widest drafted so far, within
        `cap`. A wider guess is tried once its neighbour paid, each try measuring one more width. A
        block drafter reaches its whole block at once: its drafts cost one step whatever their length,
        so a dear block may pay drafted wide and never drafted narrow, where it would never start."""
        return cap if self.block else min(cap, after(self.widest))

    def estimate(self) -> AutoEstimate:
        return AutoEstimate(self.costs.estimate(), tuple(self.acceptance.rates()[: self.limit]))

    @property
    def planned(self) -> None:
        """None: it chooses each round's length."""
        return None

    @property
    def auto(self) -> "AutoDraft":
        return self


def _choose(acceptance: Acceptance, costs: Costs, cap: int, catch_up: float = 0.0, blocks: bool = False) -> int:
    """The width to draft: none for a drafter given up (`Acceptance.gave_up`), else `_argmax`'s."""
    return 0 if acceptance.gave_up else _argmax(acceptance.rates(), costs, cap, catch_up, blocks)


def _argmax(rates: list[float], costs: Costs, cap: int, catch_up: float = 0.0, blocks: bool = False) -> int:
    """The width of the set, up to `cap`, of most tokens per plain round; a round that drafts
    costs `catch_up` plain rounds more, and k drafter steps (one for a block drafter's)."""
    step = costs.step
    return max(within(cap, blocks), key=lambda k: expected_tokens(rates, k) / (
        draft_steps(k, blocks) * step + costs.verify(k) + catch_up * (k > 0)))


class AutoDrafts:
    """Each drafter's automatic draft length, by drafter name, kept across
    generations: what it measured (costs, acceptance) is the machine's and the
    drafter's, so every conversation on this machine can start from it."""

    def __init__(self) -> None:
        self._by_name: dict[str, AutoDraft] = {}

    def of(self, name: str, limit: int, start: int, block: int = 0) -> AutoDraft:
        """`name`'s automatic length; made with `limit`, `start` and `block` on first use."""
        auto = self._by_name.get(name)
        if auto is None:
            auto = self._by_name[name] = AutoDraft(limit, start, block)
        return auto
