"""The bench on a sharded target: what it leaves out, and what sharding costs.

mlx-lm drafts only in one process (its server refuses draft models when
distributed), so its speculative rows are left out; the calibration times
drafter steps on rank 0 alone, so it is left out too. What is added: each
rank's memory, and the collectives' time against a round's.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Sequence

from ..distributed import Group
from ..distributed.measure import KB, collective_ms, memory
from ..distributed.memory import split
from ..vocab import vocab_size
from .lineup import Lineup
from .plan import MLX_LM_SPEC, SPECMLX
from .runs import Measurement

def sharded_options(options, say: Callable[[str], None]):
    """The options a sharded bench can run."""
    if MLX_LM_SPEC in options.modes:
        say("--distributed: mlx-lm's speculative decoding runs in one process only; its rows are left out")
    if options.calibration_steps:
        say("--distributed: no calibration (it times drafter steps alone); no predicted speed-ups")
    return replace(options, modes=tuple(m for m in options.modes if m != MLX_LM_SPEC), calibration_steps=0)


def sharded_figures(group: Group, lineup: Lineup, measurements: Sequence[Measurement]) -> dict:
    """Every rank's memory, and what the lockstep and the sharded layers' sums cost a round.
    Every rank must call it (it measures with collectives)."""
    model, lockstep = lineup.target.model, lineup.lockstep
    args = model.args
    hidden, layers = args.hidden_size, args.num_hidden_layers
    runs = [m for m in measurements if m.mode == SPECMLX]
    rounds = sum(m.rounds for m in runs)
    round_ms = 1000 * sum(m.decode_s for m in runs) / rounds if rounds else 0.0
    rows = 1 + max((m.num_draft or 0 for m in runs), default=4)  # a round scores [last, d1..dk]
    message_ms = collective_ms(group, (2,))
    block_ms = collective_ms(group, (rows, hidden), dtype=model.model.norm.weight.dtype)
    tensor = not lockstep.pipeline
    return {
        "ranks": group.size,
        "sharding": "pipeline" if lockstep.pipeline else "tensor",
        "vocab_split": lockstep.vocab,
        "target_whole_kb": split(lineup.target.path).whole // KB,
        "memory": memory(group, model),
        "round_ms": round_ms,
        "lockstep_messages": lockstep.messages,
        "lockstep_wait_ms": 1000 * lockstep.control_s / lockstep.messages if lockstep.messages else 0.0,
        "message_ms": message_ms,
        "hidden_block": [rows, hidden],
        "hidden_block_ms": block_ms,
        # mlx-lm's shard(): two sums a layer (attention and MLP outputs); a split vocabulary one for the embedding, one gather of logits
        "forward_sums": 2 * layers + 2 * lockstep.vocab if tensor else 0,
        "vocab": vocab_size(model),
    }


def render_sharded(f: dict) -> str:
    """The sharded bench's own lines under the table."""
    ranks = "; ".join(f"rank {i}: target {m['target_kb'] / 1024:.0f} MB ({m['target_kb'] / f['target_whole_kb']:.2f} "
                      f"of {f['target_whole_kb'] / 1024:.0f} MB), peak resident {m['peak_rss_kb'] / 1024:.0f} MB"
                      for i, m in enumerate(f["memory"]))
    sums_ms = f["forward_sums"] * f["hidden_block_ms"]
    share = (lambda ms: f"{100 * ms / f['round_ms']:.1f}% of a {f['round_ms']:.0f} ms round") if f["round_ms"] else (
        lambda ms: "no specmlx rounds")
    lockstep_ms = 3 * f["message_ms"]  # announce, share, decide
    return "\n".join([
        "",
        f"### sharded over {f['ranks']} ranks ({f['sharding']} parallel"
        + (", vocabulary split" if f["vocab_split"] else "") + ")",
        "",
        f"- memory: {ranks}",
        f"- lockstep: 3 small collectives a round (announce, share the draft, decide), {f['message_ms']:.2f} ms each "
        f"alone: {lockstep_ms:.2f} ms, {share(lockstep_ms)}; rank 0 waited {f['lockstep_wait_ms']:.2f} ms per "
        f"announcement in the runs ({f['lockstep_messages']} of them), the other ranks' lag included",
        f"- the sharded layers: {f['forward_sums']} sums of a {f['hidden_block'][0]}×{f['hidden_block'][1]} block "
        f"a forward, {f['hidden_block_ms']:.2f} ms each alone: {sums_ms:.1f} ms, {share(sums_ms)}",
    ])
