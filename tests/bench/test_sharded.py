"""`specmlx bench --distributed` on two local ranks: rank 0 reports, the other rank
prints nothing; each rank holds about half the target; mlx-lm's rows are left out."""

from __future__ import annotations

import json

from ..distributed import ranks


def test_rank_0_reports_memory_and_collectives(model_dirs, tmp_path):
    out = tmp_path / "bench.json"
    lead, other = ranks.run(["bench", "--target", str(model_dirs["target"]), "--drafter", f"{model_dirs['drafter']},none",
                             "--limit", "2", "--max-tokens", "8", "--temps", "0", "--num-draft", "2",
                             "--distributed", "--json", str(out)], tmp_path)
    assert lead.returncode == 0, lead.stderr[-2000:]
    assert other.returncode == 0 and other.stdout == "", other.stderr[-2000:]
    assert "### sharded over 2 ranks (tensor parallel, vocabulary split)" in lead.stdout
    assert "mlx-lm-spec" not in lead.stdout and "mlx-lm's speculative decoding runs in one process" in lead.stderr
    doc = json.loads(out.read_text())
    figures = doc["config"]["distributed"]
    assert len(figures["memory"]) == 2
    for rank in figures["memory"]:  # layers and vocabulary split in two; only the final norm is whole
        assert 0.45 < rank["target_kb"] / figures["target_whole_kb"] < 0.55
    assert figures["lockstep_messages"] > 0 and figures["message_ms"] > 0
    equal = [r for r in doc["results"] if r["mode"] == "specmlx"]
    assert equal and all(r["same_as_target"] == r["prompts"] for r in equal), equal
