"""Verification on hand-built arrays: greedy acceptance and exact rejection sampling."""

import mlx.core as mx
import numpy as np
import pytest
from scipy.stats import chisquare

from specmlx.verify import next_distribution, verify_greedy, verify_sampled

DRAWS = 20_000


def test_greedy_accepts_the_matching_prefix_then_corrects():
    logits = mx.array(np.eye(5, dtype=np.float32)[[2, 3, 1, 4]])  # argmaxes 2, 3, 1, 4
    for draft, accepted, following in [
        ([2, 3, 1], 3, 4),  # all accepted: bonus from the last row
        ([2, 3, 0], 2, 1),  # third rejected: the target's own token
        ([0, 3, 1], 0, 2),  # first rejected: later matches do not count
    ]:
        n, token = verify_greedy(logits, mx.array(draft))
        assert (n.item(), token.item()) == (accepted, following)


def test_greedy_with_nothing_drafted_is_plain_argmax():
    n, token = verify_greedy(mx.array([[0.0, 5.0, 1.0]]), mx.zeros((0,), dtype=mx.uint32))
    assert (n.item(), token.item()) == (0, 1)


def first_tokens(p: np.ndarray, q: np.ndarray | None, seed: int = 0) -> np.ndarray:
    """The first token of each of DRAWS one-draft rounds: the draft if
    accepted, else the residual sample. It must be distributed as p[0].

    All draws are one vectorised graph (`mx.vmap` over their keys), evaluated
    once: the same draws as calling `verify_sampled` DRAWS times, each synced."""
    p_mx = mx.array(p)
    q_mx = None if q is None else mx.array(q)

    def first(key: mx.array) -> mx.array:
        draft_key, verify_key = mx.random.split(key)
        if q_mx is None:
            draft = mx.array([1])  # a deterministic drafter always proposes token 1
        else:
            draft = mx.random.categorical(mx.log(q_mx[0]), key=draft_key).reshape(1)
        n, token = verify_sampled(p_mx, q_mx, draft, verify_key)
        return mx.where(n > 0, draft[0], token)

    keys = mx.random.split(mx.random.key(seed), DRAWS)
    return np.array(mx.vmap(first)(keys), dtype=np.int64)


def test_vectorised_draws_are_the_draws_of_separate_calls():
    """What makes the batched check above a check of `verify_sampled` itself."""
    p, q = (np.array(r, dtype=np.float32) for r in CASES["overlapping"])
    p2 = np.stack([p, np.full(4, 0.25, np.float32)])
    batched = first_tokens(p2, q[None])
    keys = mx.random.split(mx.random.key(0), DRAWS)
    for i in range(0, DRAWS, DRAWS // 40):
        draft_key, verify_key = mx.random.split(keys[i])
        draft = mx.random.categorical(mx.log(mx.array(q)), key=draft_key).reshape(1)
        n, token = verify_sampled(mx.array(p2), mx.array(q[None]), draft, verify_key)
        assert batched[i] == (draft.item() if n.item() > 0 else token.item())


def assert_distributed_as(samples: np.ndarray, probs: np.ndarray) -> None:
    probs = np.asarray(probs, dtype=np.float64)
    support = probs > 0
    counts = np.bincount(samples, minlength=len(probs))
    assert counts[~support].sum() == 0, "a token outside p's support was emitted"
    expected = probs[support] / probs[support].sum() * len(samples)
    if support.sum() > 1:
        assert chisquare(counts[support], expected).pvalue > 1e-3


CASES = {
    "overlapping": ([0.1, 0.2, 0.3, 0.4], [0.4, 0.3, 0.2, 0.1]),
    "disjoint supports": ([0.0, 0.0, 0.5, 0.5], [0.6, 0.4, 0.0, 0.0]),
    "one-hot target": ([0.0, 0.0, 1.0, 0.0], [0.25, 0.25, 0.25, 0.25]),
    "one-hot drafter": ([0.3, 0.3, 0.2, 0.2], [0.0, 1.0, 0.0, 0.0]),
    "identical": ([0.1, 0.6, 0.1, 0.2], [0.1, 0.6, 0.1, 0.2]),
    "tiny probabilities": ([1e-30, 0.5 - 1e-30, 0.5, 0.0], [0.5, 1e-30, 0.5 - 1e-30, 0.0]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_rejection_sampling_reproduces_the_target(name):
    p_row, q_row = (np.array(r, dtype=np.float32) for r in CASES[name])
    p = np.stack([p_row, np.full(4, 0.25, np.float32)])  # second row: the bonus distribution
    assert_distributed_as(first_tokens(p, q_row[None]), p_row)


def test_deterministic_drafter_is_exact():
    p = np.array([[0.1, 0.5, 0.1, 0.3], [0.25] * 4], dtype=np.float32)
    assert_distributed_as(first_tokens(p, None), p[0])


def test_the_check_can_fail():
    """Negative control: emitting the draft unverified gives q, and the test sees it."""
    p, q = (np.array(r, dtype=np.float32) for r in CASES["overlapping"])
    rng = np.random.default_rng(0)
    with pytest.raises(AssertionError):
        assert_distributed_as(rng.choice(4, size=DRAWS, p=q), p)


def test_all_accepted_draws_the_bonus_from_the_last_row():
    p = mx.array([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    q = mx.array([[0.0, 1.0, 0.0]])
    n, token = verify_sampled(p, q, mx.array([1]), mx.random.key(3))
    assert (n.item(), token.item()) == (1, 2)


def test_a_rejection_draws_from_the_residual_and_all_accepted_from_the_bonus_row():
    p = mx.array([[0.1, 0.6, 0.3], [0.2, 0.2, 0.6]])
    q = mx.array([[0.5, 0.2, 0.3]])
    assert np.allclose(next_distribution(p, q, mx.array(0)), [0.0, 0.4, 0.0])  # max(0, p - q)
    assert np.allclose(next_distribution(p, q, mx.array(1)), [0.2, 0.2, 0.6])  # p_k


def test_an_all_zero_residual_falls_back_to_p():
    # q equals p on the row: max(0, p - q) is all zero, and a categorical
    # over log(0) everywhere would be meaningless (NaN or always token 0).
    p = mx.array([[0.25, 0.75, 0.0], [1 / 3, 1 / 3, 1 / 3]])
    q = mx.array([[0.25, 0.75, 0.0]])
    assert np.allclose(next_distribution(p, q, mx.array(0)), [0.25, 0.75, 0.0])
    # q above p everywhere p has mass (float rounding): the same fallback.
    q = mx.array([[0.25 + 1e-6, 0.75 + 1e-6, 0.0]])
    assert np.allclose(next_distribution(p, q, mx.array(0)), [0.25, 0.75, 0.0])


def test_float32_ratio_does_not_underflow():
    # bf16 would round both to 0 and accept everything; in float32 p/q = 1e-8.
    p = mx.array([[1e-30, 1.0 - 1e-30], [0.5, 0.5]], dtype=mx.float32)
    q = mx.array([[1e-22, 1.0 - 1e-22]], dtype=mx.float32)
    rejected = sum(
        verify_sampled(p, q, mx.array([0]), mx.random.key(s))[0].item() == 0 for s in range(100)
    )
    assert rejected == 100
