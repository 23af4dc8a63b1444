"""Schedules that plan by rote, for tests of what a round does with each plan."""

from __future__ import annotations

from specmlx.plan import Plan, Round


class Alternating:
    """Plain rounds and rounds drafting `k` by turns, guessing the next round
    plain (`guess`; else never): every drafting round then follows a plain
    round that looked ahead."""

    def __init__(self, k: int, guess: bool = True) -> None:
        self.k, self.guess, self.rounds = k, guess, 0
        self.done: list[Round] = []  # the rounds it was shown

    def plan(self, room: int) -> Plan:
        self.rounds += 1
        return Plan(min(self.k, room) if self.rounds % 2 == 0 else 0)

    def likely_plain(self, room: int) -> bool:
        return self.guess

    def update(self, done: Round, seconds: float) -> None:
        self.done.append(done)

    def estimate(self) -> None:
        return None

    planned = None  # it chooses each round's length: the stats report the policy's start
    auto = None


class Probing(Alternating):
    """Rounds that draft nothing and probe the drafter, every one."""

    def __init__(self) -> None:
        super().__init__(0, guess=False)

    def plan(self, room: int) -> Plan:
        return Plan(0, probe=True)
