"""A pair is checked (tokenizers, then memory) before any weights load."""

import pytest

from specmlx import loading, memory
from specmlx.errors import SpecmlxError

from . import tiny


@pytest.fixture
def no_memory(monkeypatch):
    monkeypatch.setattr(memory, "available_bytes", lambda: 0)


@pytest.fixture
def other_family(tmp_path):
    """A drafter with a tokenizer of its own: every id means something else."""
    other = tiny.train_tokenizer(vocab_size=300)
    args = tiny.qwen2_args(len(other), hidden=32)
    return tiny.save_model(tiny.build(args, seed=3), args, other, tmp_path / "other")


def test_a_drafter_of_another_family_is_refused_before_the_memory_check(model_dirs, other_family, no_memory):
    with pytest.raises(SpecmlxError, match=r"drafter \S*other cannot draft for target \S*target: their vocabularies differ"):
        loading.check_pair(str(model_dirs["target"]), str(other_family))


def test_a_matching_pair_that_does_not_fit_is_refused_without_loading(model_dirs, no_memory, monkeypatch):
    monkeypatch.setattr(loading, "load", lambda *a, **k: pytest.fail("weights were loaded"))
    with pytest.raises(SpecmlxError, match="only 0.0 GB is available"):
        loading.load_pair(str(model_dirs["target"]), str(model_dirs["drafter"]))


def test_a_matching_pair_loads(model_dirs):
    target, drafter = loading.load_pair(str(model_dirs["target"]), str(model_dirs["drafter"]))
    assert target.path == model_dirs["target"] and drafter.name == str(model_dirs["drafter"])


def test_a_broken_tokenizer_is_one_line(model_dirs, tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{}")
    with pytest.raises(SpecmlxError, match=r"broken: cannot load its tokenizer"):
        loading.check_pair(str(model_dirs["target"]), str(broken))
