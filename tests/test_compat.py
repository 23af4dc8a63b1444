"""Target/drafter compatibility is checked before generating."""

import pytest
from mlx_lm.tokenizer_utils import TokenizerWrapper

from specmlx.compat import check_compatible, check_vocab_fits
from specmlx.errors import SpecmlxError

from . import tiny


def test_same_tokenizer_is_compatible(tokenizer):
    check_compatible(TokenizerWrapper(tokenizer), TokenizerWrapper(tokenizer), "t", "d")


def test_other_vocabulary_is_refused_naming_both(tokenizer):
    other = tiny.train_tokenizer(vocab_size=300)
    with pytest.raises(SpecmlxError, match=r"drafter small-lm cannot draft for target big-lm: their vocabularies differ"):
        check_compatible(TokenizerWrapper(tokenizer), TokenizerWrapper(other), "big-lm", "small-lm")


def test_other_special_tokens_are_refused(tokenizer, tmp_path):
    tokenizer.save_pretrained(tmp_path)
    from transformers import AutoTokenizer

    other = AutoTokenizer.from_pretrained(tmp_path, eos_token="<|endoftext|>")
    with pytest.raises(SpecmlxError, match="special token eos"):
        check_compatible(TokenizerWrapper(tokenizer), TokenizerWrapper(other), "t", "d")


def test_an_embedding_table_smaller_than_the_vocabulary_is_refused(tokenizer):
    with pytest.raises(SpecmlxError, match="ids up to"):
        check_vocab_fits(tokenizer, len(tokenizer) - 10, "m")
    check_vocab_fits(tokenizer, len(tokenizer) + 64, "m")  # padding is fine
