"""A rank's share of the target, from the checkpoint's headers, and the refusal that says how many ranks fit."""

from __future__ import annotations

import pytest

from specmlx.distributed.memory import Split, check_rank_fits, split
from specmlx.errors import SpecmlxError
from specmlx.memory import GB


def test_split_reads_layers_vocabulary_and_the_rest(dirs, target_args):
    parts = split(dirs["target"])
    h, v, layers = target_args.hidden_size, target_args.vocab_size, target_args.num_hidden_layers
    assert parts.vocab == 2 * v * h * 4  # embeddings and an untied head, float32
    assert parts.rest == h * 4  # the final norm
    assert parts.layers > 0 and parts.whole == parts.layers + parts.vocab + parts.rest
    assert parts.count == layers == 2


def test_a_share_halves_the_layers_and_the_vocabulary_when_split():
    parts = Split(layers=8 * GB, vocab=2 * GB, rest=0, count=8)
    assert parts.share(2, vocab_split=True) == 5 * GB
    assert parts.share(2, vocab_split=False) == 6 * GB
    assert parts.share(4, vocab_split=True) == parts.whole // 4


def test_pipeline_stages_hold_whole_layers_the_first_one_more():
    parts = Split(layers=3 * GB, vocab=0, rest=0, count=3)
    assert parts.share(2, vocab_split=False, pipeline=True) == 2 * GB  # rank 0 runs two of the three
    assert parts.share(2, vocab_split=False) == 3 * GB // 2  # tensor parallel splits every layer


def test_a_rank_that_does_not_fit_is_told_how_many_would(monkeypatch, dirs):
    whole = split(dirs["target"]).whole
    # Room for a third of the target (its final norm is whole on every rank): three ranks fit, two do not.
    monkeypatch.setattr("specmlx.distributed.memory.needed_bytes", lambda n: n)
    check_rank_fits(dirs["target"], [], 2, vocab_split=True, available=whole // 2 + 256)
    with pytest.raises(SpecmlxError, match=r"this rank would hold 1/2 of the target, about .* GB, but only .* GB "
                       r"is available; 3 ranks would fit$"):
        check_rank_fits(dirs["target"], [], 2, vocab_split=True, available=whole // 3 + 256)


def test_rank_0_counts_its_drafters(monkeypatch, dirs):
    monkeypatch.setattr("specmlx.distributed.memory.needed_bytes", lambda n: n)
    whole = split(dirs["target"]).whole
    with pytest.raises(SpecmlxError, match="and the drafter"):
        check_rank_fits(dirs["target"], [dirs["drafter"]], 2, vocab_split=True, available=whole // 2 + 256)
