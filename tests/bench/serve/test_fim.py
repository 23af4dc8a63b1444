"""The FIM bench on a tiny FIM model: requests cut from the standard library, every drafter, figures printed."""

from __future__ import annotations

import json

import pytest

from specmlx.bench.serve.fim import MODULES, build_parser, cut_cases, main


def test_requests_are_cut_from_the_standard_library_at_a_statement():
    cases = cut_cases(10, 48, 16, 2)
    assert len({c.id.split(":")[0] for c in cases}) == 10 and {c.id.split(":")[0] for c in cases} <= set(MODULES)
    for c in cases:
        assert c.middle.strip() and not c.middle[0].isspace()  # the gap starts at a statement, after its indent
        assert c.prefix.endswith((" ", "\n")) and c.suffix.strip()
        assert c.prefix.count("\n") <= 48 and c.suffix.count("\n") <= 16 and c.middle.count("\n") == 2
    assert cut_cases(10, 48, 16, 2) == cases  # the same ten, run after run


def test_it_measures_every_drafter_on_fim_requests(tmp_path, capsys, fim_dirs):
    out = tmp_path / "fim.json"
    assert main(["--target", str(fim_dirs["target"]), "--drafter", str(fim_dirs["drafter"]), "--requests", "2",
                 "--max-tokens", "6", "--prefix-lines", "8", "--suffix-lines", "4", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    figures = json.loads(out.read_text())
    assert list(figures["summary"]) == ["none", "drafter", "ngram"] and figures["layout"] == "qwen"
    for name, runs in figures["runs"].items():
        assert [len(r["tokens"]) for r in runs] == [6, 6], name  # end tokens ignored: every answer is 6 long
        assert all(0 < r["first_s"] <= r["total_s"] for r in runs), name
        assert figures["summary"][name]["same_as_target"] == 2, name  # greedy: every drafter, the same tokens
    assert "| none | " in printed and "| ngram | " in printed and "6 tokens mean (s)" in printed


def test_a_model_without_fim_tokens_is_one_line(served_dirs, capsys):
    assert main(["--target", str(served_dirs["target"]), "--drafter", "none", "--requests", "1"]) == 2
    assert capsys.readouterr().err.strip().endswith("target has no fill-in-the-middle tokens")


def test_help_names_its_defaults():
    text = build_parser().format_help()
    assert "--requests" in text and "default 10" in text and "default 32" in text
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--help"])
