"""Prompt lookup."""

import random

import mlx.core as mx
import pytest

from specmlx.drafters.ngram import PromptLookupDrafter, lookup, may_match
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


def naive_lookup(tokens, num_draft, max_ngram, min_ngram):
    """The lookup as first written: a Python scan, most recent match first, longest tail first."""
    size = len(tokens)
    for n in range(min(max_ngram, size - 1), min_ngram - 1, -1):
        tail = list(tokens[size - n :])
        for start in range(size - n - 1, -1, -1):
            if list(tokens[start : start + n]) == tail and tokens[start + n : start + n + num_draft]:
                return list(tokens[start + n : start + n + num_draft])
    return []


def sequences():
    """Short sequences over small vocabularies (many matches), large ids (2**31 and up), and ids whose
    bytes are all 0 or 1 (many byte matches off a word boundary, which are no match)."""
    rng = random.Random(0)
    for vocab, offset in ((2, 0), (3, 0), (7, 0), (300, 0), (5, 2**31)):
        for _ in range(60):
            yield [offset + rng.randrange(vocab) for _ in range(rng.randrange(0, 40))]
    words = [int.from_bytes(bytes(rng.randrange(2) for _ in range(4)), "little") for _ in range(4)]
    for _ in range(200):  # ids of bytes 0 and 1: a tail's bytes often match off a word boundary
        yield [rng.choice(words) for _ in range(rng.randrange(0, 40))]


def test_the_packed_search_finds_what_a_python_scan_finds():
    for tokens in sequences():
        for max_ngram, min_ngram in ((3, 1), (8, 2), (8, 3), (2, 2)):
            for num_draft in (1, 4):
                assert lookup(tokens, num_draft, max_ngram, min_ngram) == \
                    naive_lookup(tokens, num_draft, max_ngram, min_ngram), (tokens, max_ngram, min_ngram)


@pytest.mark.parametrize("min_ngram", [1, 2, 3])
def test_may_match_is_false_only_when_no_next_token_makes_a_match(min_ngram):
    """Sound (False: every next token finds nothing) and tight (True: some next token finds something)."""
    seen = {False: 0, True: 0}
    for tokens in sequences():
        nexts = set(tokens) | {-1 % 2**32}  # a token never seen matches nothing new
        found = any(lookup(tokens + [t], 4, 8, min_ngram) for t in nexts)
        assert may_match(tokens, min_ngram) == found, (tokens, min_ngram)
        seen[found] += 1
    assert seen[False] and seen[True]
