"""Prompt lookup."""

import mlx.core as mx

from specmlx.drafters.ngram import PromptLookupDrafter, lookup
from specmlx.sampling import SamplingParams


def test_copies_what_followed_the_latest_match_of_the_tail():
    tokens = [1, 2, 3, 9, 9, 1, 2, 3, 7, 8, 5, 1, 2, 3]
    assert lookup(tokens, 2, max_ngram=3, min_ngram=1) == [7, 8]


def test_longer_ngrams_win_over_more_recent_shorter_ones():
    tokens = [4, 5, 6, 0, 0, 9, 6, 1, 4, 5, 6]
    assert lookup(tokens, 1, max_ngram=3, min_ngram=1) == [0]


def test_no_match_drafts_nothing():
    assert lookup([1, 2, 3, 4], 3, max_ngram=3, min_ngram=1) == []


def test_draft_is_deterministic():
    draft = PromptLookupDrafter().draft([1, 2, 3, 1, 2], 4, SamplingParams(temp=1.0), mx.random.key(0))
    assert draft.tokens.tolist() == [3, 1, 2] and draft.probs is None
