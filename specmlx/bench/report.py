"""The markdown table for stdout and the JSON document for files."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any, Sequence

from ..errors import SpecmlxError
from .calibrate import Calibration
from .runs import Measurement
from .summary import Row

COLUMNS = ("mode", "drafter", "temp", "k", "tokens", "tok/s", "× target, median (min–max)", "× target, total",
           "lowest × (prompt)", "predicted ×",
           "× mlx-lm", "mean acc.", "accept", "prediction acc.", "α", "chosen k", "plain rounds", "ms/round",
           "forwards ms/round", "host/round (steps)", "draft/verify/other ms", "= target")


def _num(value: float | None, spec: str, suffix: str = "") -> str:
    return "–" if value is None else f"{value:{spec}}{suffix}"


def _median(row: Row) -> str:
    """The headline: the median per-prompt speed-up, and the lowest and highest."""
    if row.median_speedup is None:
        return "–"
    return f"{row.median_speedup:.2f}× ({row.min_speedup:.2f}–{row.max_speedup:.2f})"


def _cells(row: Row) -> list[str]:
    split = row.split_per_round
    lowest = "–" if row.min_speedup is None else f"{row.min_speedup:.2f}× ({row.min_prompt})"
    return [
        row.mode, row.drafter or "–", f"{row.temp:g}", "auto" if row.num_draft is None else str(row.num_draft),
        str(row.tokens), f"{row.tokens_per_s:.2f}", _median(row), _num(row.speedup, ".2f", "×"), lowest,
        _num(row.predicted_speedup, ".2f", "×"), _num(row.vs_mlx_lm, ".2f", "×"), f"{row.mean_accepted:.2f}",
        _num(None if row.acceptance_rate is None else 100 * row.acceptance_rate, ".0f", "%"),
        "–" if row.prediction_drafted is None else f"{row.prediction_accepted} of {row.prediction_drafted}",
        _num(row.alpha, ".2f"), _num(row.mean_chosen, ".2f"),
        _num(None if row.plain_share is None else 100 * row.plain_share, ".0f", "%"), f"{1000 * row.s_per_round:.1f}",
        _num(None if row.forward_s_per_round is None else 1000 * row.forward_s_per_round, ".1f"),
        _num(row.host_steps, ".2f"),
        "–" if split is None else " / ".join(f"{1000 * s:.1f}" for s in split),
        "–" if row.same_as_target is None else f"{row.same_as_target}/{row.prompts}",
    ]


def markdown_table(rows: Sequence[Row]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "|".join("---" for _ in COLUMNS) + "|"]
    lines += ["| " + " | ".join(_cells(row)) + " |" for row in rows]
    return "\n".join(lines)


def calibration_line(calibration: Calibration | None) -> str:
    if calibration is None:
        return "calibration: skipped (no predicted speed-ups)"
    drafters = "; ".join(
        f"{name} {1000 * step:.2f} ms (c = {calibration.cost_ratio(name):.3f})"
        for name, step in calibration.drafter_step_s.items()
    )
    line = (f"calibration (median of {calibration.steps} single-token steps at {calibration.context} "
            f"tokens of context): target {1000 * calibration.target_step_s:.1f} ms; {drafters}")
    if calibration.drafter_forward_s:
        line += "; drafter forward alone: " + ", ".join(
            f"{name} {1000 * step:.2f} ms" for name, step in calibration.drafter_forward_s.items())
    if calibration.verify_step_s:
        line += "; target forward of n tokens (a verify pass of k = n-1): " + ", ".join(
            f"n={rows} {1000 * step:.0f} ms ({calibration.verify_ratio(rows):.2f} steps)"
            for rows, step in calibration.verify_step_s.items())
    return line


NOTES = (
    "tok/s: total tokens / total decode seconds over all prompts; decode starts at the forward of "
    "the last prompt token, so prompt processing is excluded in every mode.",
    "× target, median: the headline, the median over prompts of a run's tok/s over the target alone's on the "
    "same prompt at the same temperature (measured in the same prompt's turn), with the lowest and highest "
    "such ratio; × target, total: total tok/s over the target alone's, which one slow prompt can decide; "
    "lowest ×: the worst prompt's ratio, and that prompt. The JSON's prompt_speedups has every prompt's.",
    "mean acc.: tokens per target forward (accepted drafts + the target's own token); "
    "accept: accepted / drafted; prediction acc.: tokens copied from the prompts' predictions "
    "(+prediction) that were accepted, of those proposed.",
    "predicted ×: Leviathan's (1-α^(k+1)) / ((1-α)(k·c+v)), α solved from mean acc. at k, "
    "c and v (a forward of k+1 tokens in target steps; Leviathan takes v = 1) from the calibration.",
    "chosen k: mean draft length per round (k = auto chooses it each round, 0 = plain decoding); "
    "plain rounds: rounds that proposed nothing (k = 0, or no lookup match).",
    "= target: prompts (at temperature 0) whose tokens equal the target alone's.",
    "forwards ms/round: the forwards a round ran, each as calibrated (synced, alone): its drafter steps "
    "and one target forward of its width (tokens drafted + 1); host/round: ms/round less those forwards, "
    "in steps of the target alone (its ms/round, pipelined): what a round costs beyond its forwards "
    "(below 0 where forwards overlap or fuse).",
)


def skeleton_lines(skeleton: dict | None) -> list[str]:
    if skeleton is None:
        return []
    shapes = "; ".join(f"{name} {shape}" for name, shape in skeleton["models"].items())
    return [f"skeletons (random weights, head dim {skeleton['head_dim']}, MLP {skeleton['ffn']}× hidden, "
            f"real tokenizers): {shapes}"]


def kv_text(kv: dict | None) -> str:
    """The target's keys and values as every mode kept them (`--kv-bits`), the baseline included."""
    return "" if kv is None else (f" · keys and values at {kv['bits']} bits in groups of {kv['group_size']} "
                                  "in every mode (--kv-bits)")


def render(rows: Sequence[Row], machine: dict, config: dict, calibration: Calibration | None) -> str:
    """The whole stdout report: context lines, the table, and how to read it."""
    header = [
        "## specmlx bench",
        "",
        f"target: {config['target']} · drafters: {', '.join(config['drafters']) or '–'} · "
        f"{config['prompts']} prompts from {config['prompts_file']} · max tokens {config['max_tokens']}"
        + ("" if config["chat_template"] else " · no chat template: plain-text prompts")
        + kv_text(config.get("kv_bits")),
        f"backend: {machine['backend']} · BLAS: {machine['blas']} · CPU: {machine['cpu']} "
        f"({machine['cpu_count']} cores) · mlx {machine['mlx']}, mlx-lm {machine['mlx_lm']}",
        calibration_line(calibration),
        *skeleton_lines(config.get("skeleton")),
        "",
    ]
    notes = list(NOTES)
    if not any(r.split_per_round for r in rows):
        notes.append("draft/verify/other: run with --profile (one more specmlx pass, one sync per round).")
    return "\n".join(header + [markdown_table(rows), ""] + [f"- {n}" for n in notes])


def document(rows: Sequence[Row], measurements: Sequence[Measurement], machine: dict, config: dict,
             calibration: Calibration | None) -> dict[str, Any]:
    """The JSON report: `results` has one row per mode, drafter, temperature and
    draft length; `runs` the per-prompt measurements they sum."""
    runs = []
    for m in measurements:
        run = {k: v for k, v in asdict(m).items() if k != "tokens"}
        run["generated"] = m.generated
        runs.append(run)
    return {
        "machine": machine,
        "config": config,
        "calibration": None if calibration is None else asdict(calibration),
        "results": [row.to_dict() for row in rows],
        "runs": runs,
    }


def write_json(path: Path, doc: dict) -> None:
    try:
        Path(path).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    except OSError as err:
        raise SpecmlxError(f"{path}: cannot write the JSON report ({err.strerror or err})") from None
