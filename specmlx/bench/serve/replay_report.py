"""The replay's figures from its answers: a table of turns per configuration, the session's totals, one
table across configurations, and the issue's goals (the turn after a restart, the subagent, answers
equal turn for turn). Pure arithmetic over `Answered` records: tests feed it made-up ones.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from .messages import Answered
from .session import MAIN

RESTART_VS_BEFORE = 1.2  # goal: the turn after a restart waits at most 1.2x the turn before it
RESTART_VS_COLD = 0.10  # and at most 10% of a cold prefill of its prompt
BASELINES = ("disk", "memory")  # the target alone: what the drafters' decoding is measured against


@dataclass(frozen=True)
class Run:
    """One configuration's replay: its answers in order, where the server restarted, and what that took."""

    name: str
    flags: tuple[str, ...]  # the server's own flags (target, drafter, disk cache)
    answers: tuple[Answered, ...]
    restarts: tuple[int, ...] = ()  # the index of the first answer after each restart
    restart_s: tuple[float, ...] = ()  # each restart's time until the server listened again


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def cell(value: float | int | None, form: str = ".2f") -> str:
    return "-" if value is None else format(value, form)


def totals(run: Run) -> dict:
    """The session's sums: its requests' time (first byte sent to last byte read), prompt tokens by where
    they came from, answer tokens, decoding's rate over every turn, and tokens per round."""
    a = run.answers
    decode_s, rounds, tokens = sum(x.decode_s for x in a), sum(x.rounds for x in a), sum(len(x.tokens) for x in a)
    return {"requests": len(a), "session_s": sum(x.wall_s for x in a), "ttft_s": sum(x.first_s or 0.0 for x in a),
            "prompt": sum(x.prompt_tokens for x in a), "memory": sum(x.memory_tokens for x in a),
            "disk": sum(x.disk_tokens for x in a), "prefilled": sum(x.prefilled for x in a), "tokens": tokens,
            "restart_s": sum(run.restart_s), "tokens_per_s": sum(x.decoded for x in a) / decode_s if decode_s else None,
            "tokens_per_round": tokens / rounds if rounds else None}


def turn_table(run: Run) -> str:
    lines = ["| turn | thread | prompt | memory | disk | prefilled | TTFT (s) | tok/s | tok/round |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for i, a in enumerate(run.answers):
        if i in run.restarts:
            took = run.restart_s[run.restarts.index(i)]
            lines.append(f"| restart | | | | | | {took:.1f} to listen | | |")
        lines.append(f"| {a.step} | {a.thread} | {a.prompt_tokens} | {a.memory_tokens} | {a.disk_tokens} | "
                     f"{a.prefilled} | {cell(a.first_s)} | {cell(a.tokens_per_s)} | {cell(a.tokens_per_round)} |")
    t = totals(run)
    lines.append(f"| total | | {t['prompt']} | {t['memory']} | {t['disk']} | {t['prefilled']} | {t['ttft_s']:.2f} | "
                 f"{cell(t['tokens_per_s'])} | {cell(t['tokens_per_round'])} |")
    return "\n".join(lines)


def by_step(run: Run) -> dict[str, Answered]:
    return {a.step: a for a in run.answers}


def restart_goal(run: Run, cold: Run | None) -> dict | None:
    """The first restart's figures: the next turn's time to first token against the turn's before it,
    and against `cold`'s for the same turn (a server without the disk cache, just restarted)."""
    if not run.restarts or not 0 < run.restarts[0] < len(run.answers):
        return None
    before, after = run.answers[run.restarts[0] - 1], run.answers[run.restarts[0]]
    goal = {"step": after.step, "ttft_s": after.first_s, "before_step": before.step, "before_s": before.first_s,
            "vs_before": ratio(after.first_s, before.first_s), "cold_s": None, "vs_cold": None}
    cold_answer = by_step(cold).get(after.step) if cold is not None and cold is not run else None
    if cold_answer is not None:
        goal |= {"cold_s": cold_answer.first_s, "cold_cached": cold_answer.cached_tokens,
                 "vs_cold": ratio(after.first_s, cold_answer.first_s)}
    return goal


def subagents(run: Run) -> list[dict]:
    """Each subagent's first request (a thread's first but the parent's): what it prefilled, and whether
    the parent's next turn still found all of its turn before (nothing lost to the subagent)."""
    out, seen = [], set()
    for i, a in enumerate(run.answers):
        if a.thread == MAIN or a.thread in seen:
            continue
        seen.add(a.thread)
        before = next((b for b in reversed(run.answers[:i]) if b.thread == MAIN), None)
        after = next((b for b in run.answers[i + 1:] if b.thread == MAIN), None)
        row = {"step": a.step, "prompt": a.prompt_tokens, "cached": a.cached_tokens, "prefilled": a.prefilled}
        if before is not None and after is not None:
            row |= {"parent_step": after.step, "parent_cached": after.cached_tokens,
                    "parent_prompt": after.prompt_tokens, "parent_before": before.prompt_tokens,
                    "parent_kept": after.cached_tokens >= before.prompt_tokens}
        out.append(row)
    return out


def agreement(runs: list[Run]) -> dict[str, list[str]]:
    """For each run after the first, the turns whose answer differs from the first run's (or is missing)."""
    if not runs:
        return {}
    first = by_step(runs[0])
    differ = {}
    for run in runs[1:]:
        answers = by_step(run)
        differ[run.name] = [step for step, a in first.items() if step not in answers or answers[step].tokens != a.tokens]
    return differ


def goal_mark(value: float | None, bound: float) -> str:
    return "-" if value is None else ("met" if value <= bound else "missed")


def restart_line(run: Run, cold: Run | None) -> str | None:
    g = restart_goal(run, cold)
    if g is None:
        return None
    line = (f"{run.name}: after the restart, {g['step']}'s first token in {cell(g['ttft_s'])} s: "
            f"{cell(g['vs_before'])}x {g['before_step']}'s {cell(g['before_s'])} s before it "
            f"(goal <= {RESTART_VS_BEFORE}x: {goal_mark(g['vs_before'], RESTART_VS_BEFORE)})")
    if g["vs_cold"] is not None:
        cold_note = "" if g["cold_cached"] == 0 else f", though {g['cold_cached']} of its tokens were cached"
        line += (f"; {100 * g['vs_cold']:.1f}% of a cold prefill ({cold.name}: {cell(g['cold_s'])} s{cold_note}; "
                 f"goal <= {100 * RESTART_VS_COLD:.0f}%: {goal_mark(g['vs_cold'], RESTART_VS_COLD)})")
    return line


def subagent_lines(run: Run) -> list[str]:
    lines = []
    for s in subagents(run):
        line = f"{run.name}: subagent {s['step']} prefilled {s['prefilled']} of {s['prompt']} prompt tokens " \
               f"({s['cached']} cached)"
        if "parent_step" in s:
            line += (f"; the parent's next turn {s['parent_step']} found {s['parent_cached']} of {s['parent_prompt']} "
                     f"cached, its turn before was {s['parent_before']}: "
                     + ("nothing lost" if s["parent_kept"] else f"{s['parent_before'] - s['parent_cached']} lost"))
        lines.append(line)
    return lines


def across(runs: list[Run]) -> str:
    """One line per configuration: the session's totals, the turn after the restart, decoding against the
    target alone (`BASELINES`: the first of them that ran), and answers against the first configuration's."""
    differ = agreement(runs)
    base = next((r for name in BASELINES for r in runs if r.name == name), None)
    base_tps = totals(base)["tokens_per_s"] if base else None
    lines = ["| configuration | session (s) | TTFT sum (s) | prefilled | from memory | from disk | TTFT after restart (s) "
             f"| tok/s | tok/round | x {base.name if base else '-'} | answers as {runs[0].name if runs else '-'} |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for run in runs:
        t, g = totals(run), restart_goal(run, None)
        same = "-" if run is runs[0] else ("all" if not differ[run.name] else "not " + ", ".join(differ[run.name]))
        lines.append(f"| {run.name} | {t['session_s']:.1f} | {t['ttft_s']:.1f} | {t['prefilled']} | {t['memory']} | "
                     f"{t['disk']} | {cell(g['ttft_s'] if g else None)} | {cell(t['tokens_per_s'])} | "
                     f"{cell(t['tokens_per_round'])} | {cell(ratio(t['tokens_per_s'], base_tps))} | {same} |")
    return "\n".join(lines)


def report(runs: list[Run], cold: str = "memory") -> str:
    """Every table and goal line, as the replay prints them at the end; `cold`: the configuration whose
    turn after its restart is a cold prefill."""
    cold_run = next((r for r in runs if r.name == cold), None)
    parts = []
    for run in runs:
        t = totals(run)
        parts.append(f"{run.name} (specmlx serve {' '.join(run.flags)}): {t['requests']} requests in "
                     f"{t['session_s']:.1f} s" + (f", restarts {t['restart_s']:.1f} s" if run.restart_s else "")
                     + "\n" + turn_table(run))
    parts.append(across(runs))
    goals = [line for run in runs for line in [restart_line(run, cold_run), *subagent_lines(run)] if line]
    return "\n\n".join(parts + ["\n".join(goals)] if goals else parts)


def figures(runs: list[Run], cold: str = "memory") -> dict:
    """What `--json` writes: every answer, and the sums and goals the report prints."""
    cold_run = next((r for r in runs if r.name == cold), None)
    return {"runs": [{"name": r.name, "flags": list(r.flags), "restart_s": list(r.restart_s),
                      "totals": totals(r), "restart": restart_goal(r, cold_run), "subagents": subagents(r),
                      "answers": [asdict(a) for a in r.answers]} for r in runs],
            "differ_from_first": agreement(runs)}
