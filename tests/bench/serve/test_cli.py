"""The server bench on tiny models: it prints both figures and writes what it measured; and its client sweep."""

from __future__ import annotations

import json

import pytest

from specmlx.bench.serve.cli import build_parser, main, percentile
from specmlx.bench.serve.sweep import MlxLmServer, table
from specmlx.errors import SpecmlxError


def prompts_file(tmp_path, count: int = 3):
    path = tmp_path / "p.jsonl"
    path.write_text("\n".join(json.dumps({"id": f"p{i}", "kind": "code", "prompt": f"def f{i}(x):"})
                              for i in range(count)))
    return path


def test_it_measures_overhead_and_load(tmp_path, capsys, served_dirs):
    out = tmp_path / "figures.json"
    assert main(["--target", str(served_dirs["target"]), "--drafter", str(served_dirs["drafter"]),
                 "--prompts", str(prompts_file(tmp_path)), "--limit", "2", "--max-tokens", "12", "--clients", "3",
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


ROWS = ["batched-auto", "batched-none", "one-at-a-time", "mlx-lm"]


def test_the_sweep_runs_every_row_at_every_client_count(tmp_path, capsys, served_dirs):
    """Four rows at N = 1 and 2, mlx_lm.server on the tiny target included; the order flips between N's."""
    out = tmp_path / "sweep.json"
    assert main(["--target", str(served_dirs["target"]), "--drafter", str(served_dirs["drafter"]),
                 "--prompts", str(prompts_file(tmp_path)), "--clients", "1,2", "--max-tokens", "5",
                 "--max-batch", "4", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    figures = json.loads(out.read_text())
    assert list(figures["rows"]) == ROWS and figures["max_batch"] == 4
    assert [w["clients"] for w in figures["waves"]] == [1, 2]
    assert [w["order"] for w in figures["waves"]] == [ROWS, ROWS[::-1]]
    for w in figures["waves"]:
        for name, row in w["rows"].items():
            assert row["completed"] == row["requests"] == w["clients"], name
            assert row["tokens"] == 5 * w["clients"], name  # the tiny target never ends early
            assert row["ttft_p95_s"] >= row["ttft_p50_s"] > 0
        assert w["rows"]["batched-auto"]["mean_k"] is not None and w["rows"]["one-at-a-time"]["mean_k"] > 0
        assert w["rows"]["batched-none"]["mean_k"] is None and w["rows"]["mlx-lm"]["mean_k"] is None
    assert "--decode-concurrency 4" in " ".join(figures["mlx_lm_argv"])
    assert printed.count("\n| 2 | ") == 4 and table(figures) in printed


def test_the_sweep_can_leave_mlx_lm_out(tmp_path, capsys, served_dirs):
    out = tmp_path / "sweep.json"
    assert main(["--target", str(served_dirs["target"]), "--drafter", str(served_dirs["drafter"]),
                 "--prompts", str(prompts_file(tmp_path)), "--clients", "2,", "--max-tokens", "4", "--no-mlx-lm",
                 "--json", str(out)]) == 0
    figures = json.loads(out.read_text())
    assert list(figures["rows"]) == ROWS[:3] and "mlx_lm_argv" not in figures
    assert figures["max_batch"] == 16  # batched whole at the sweep's largest N, and at 16 whatever the list
    assert "| 2 | " in capsys.readouterr().out and "× mlx_lm" in table(figures)


def test_the_sweep_runs_the_rows_asked_for(tmp_path, capsys, served_dirs):
    out = tmp_path / "sweep.json"
    assert main(["--target", str(served_dirs["target"]), "--drafter", str(served_dirs["drafter"]),
                 "--prompts", str(prompts_file(tmp_path)), "--clients", "2,", "--max-tokens", "4",
                 "--rows", "batched-none,batched-auto", "--json", str(out)]) == 0
    figures = json.loads(out.read_text())
    assert list(figures["rows"]) == ROWS[:2] and "mlx_lm_argv" not in figures
    assert set(figures["waves"][0]["rows"]) == set(ROWS[:2])
    assert "no drafter" in capsys.readouterr().out


@pytest.mark.parametrize("text", ["batched", "mlx-lm,nope", ","])
def test_unknown_rows_are_refused_in_one_line(text, capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--clients", "2,", "--rows", text])
    assert "rows are some of batched-auto, batched-none, one-at-a-time, mlx-lm" in capsys.readouterr().err


@pytest.mark.parametrize("text, clients", [("8", 8), ("1,2,4,8,16", [1, 2, 4, 8, 16]), ("4,", [4])])
def test_one_count_is_the_load_figure_and_a_list_the_sweep(text, clients):
    assert build_parser().parse_args(["--clients", text]).clients == clients


@pytest.mark.parametrize("text", ["0", "1,x", ","])
def test_bad_client_counts_are_refused(text, capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--clients", text])
    assert "--clients" in capsys.readouterr().err


def test_percentiles_are_of_the_sorted_values():
    assert percentile([5, 1, 3, 2, 4], 0.5) == 3
    assert percentile([5, 1, 3, 2, 4], 0.95) == 5


def test_an_mlx_lm_server_that_cannot_load_is_one_line_naming_its_log(tmp_path):
    log = tmp_path / "mlx_lm.log"
    with pytest.raises(SpecmlxError, match=r"^mlx_lm.server failed \(.*\); its output: .*mlx_lm.log$"):
        with MlxLmServer(tmp_path / "no-model", 2, 4, log):
            pass
    assert log.exists()  # kept: it says why
