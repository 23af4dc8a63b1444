"""`python -m specmlx.bench.kv` prints a row for each context and setting: the cache's bytes a position at 8 and
4 bits against the weights' width, what it holds, and whether the answer is the unquantized one's."""

from __future__ import annotations

from specmlx.bench import kv

from .. import tiny


def test_it_prints_what_each_setting_holds_a_position(tmp_path, capsys):
    tok = tiny.train_tokenizer()
    args = tiny.qwen2_args(len(tok), hidden=128)
    path = tiny.save_model(tiny.build(args, seed=0), args, tok, tmp_path / "wide")
    assert kv.main(["--target", str(path), "--contexts", "40,80", "--tokens", "4", "--group-size", "32"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[2:]]
    assert [(r[0], r[1]) for r in rows] == [("40", "as"), ("40", "8-bit"), ("40", "4-bit"),
                                            ("80", "as"), ("80", "8-bit"), ("80", "4-bit")]
    wide = {r[0]: int(r[3]) for r in rows if r[1] == "as"}
    # float32 heads of 32: 128 bytes a value row; 8 bits 32 + a scale and a bias of 4 bytes; 4 bits 16 + 8
    assert all(int(r[3]) * 128 == wide[r[0]] * {"8-bit": 40, "4-bit": 24}[r[1]] for r in rows if r[1] != "as")
    assert all(float(r[6]) > 0 for r in rows)
