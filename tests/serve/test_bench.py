"""The server bench on tiny models: it prints both figures and writes what it measured."""

from __future__ import annotations

import json

from specmlx.serve.bench import main, percentile


def test_it_measures_overhead_and_load(tmp_path, capsys, served_dirs):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("\n".join(json.dumps({"id": f"p{i}", "kind": "code", "prompt": f"def f{i}(x):"})
                                 for i in range(3)))
    out = tmp_path / "figures.json"
    assert main(["--target", str(served_dirs["target"]), "--drafter", str(served_dirs["drafter"]),
                 "--prompts", str(prompts), "--limit", "2", "--max-tokens", "12", "--clients", "3",
                 "--requests", "2", "--load-tokens", "6", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    figures = json.loads(out.read_text())
    over, load = figures["overhead"], figures["load"]
    assert [r["id"] for r in over["runs"]["direct"]] == [r["id"] for r in over["runs"]["server"]] == ["p0", "p1"]
    assert all(r["tokens"] == 12 for way in over["runs"].values() for r in way)
    assert over["ratio"] == over["server_tps"] / over["direct_tps"]
    assert (load["requests"], load["completed"], load["refused_429"]) == (6, 6, 0)
    assert load["queue_wait_p95_s"] >= load["queue_wait_p50_s"] >= 0
    assert f"{over['ratio']:.3f}x end to end" in printed and "6/6 completed" in printed


def test_percentiles_are_of_the_sorted_values():
    assert percentile([5, 1, 3, 2, 4], 0.5) == 3
    assert percentile([5, 1, 3, 2, 4], 0.95) == 5
