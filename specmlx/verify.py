"""Verification: how many drafted tokens to accept, and which token comes next.

Pure functions of arrays, built lazily so the engine can fold them into the
same graph as the target's forward pass and sync once per round.

Shapes: k drafted tokens, V vocabulary entries.
- `logits` / `p`: (k + 1, V), the target at [last, d1..dk]
- `q`: (k, V), the drafter's distribution at each drafted position
- `draft`: (k,)
Both verify functions return (accepted, next_token) as scalar arrays.
"""

from __future__ import annotations

import mlx.core as mx


def verify_greedy(logits: mx.array, draft: mx.array) -> tuple[mx.array, mx.array]:
    """Temperature 0: accept while the draft equals the target's argmax."""
    target_tokens = mx.argmax(logits, axis=-1)  # (k + 1,)
    k = draft.shape[0]
    if k == 0:
        return mx.array(0), target_tokens[0]
    matches = (target_tokens[:k] == draft).astype(mx.int32)
    accepted = mx.cumprod(matches).sum()
    return accepted, mx.take(target_tokens, accepted)


def verify_sampled(
    p: mx.array, q: mx.array | None, draft: mx.array, key: mx.array
) -> tuple[mx.array, mx.array]:
    """Modified rejection sampling (Leviathan et al. 2023, Chen et al. 2023).

    Draft i is accepted with probability min(1, p_i(d_i) / q_i(d_i)). At the
    first rejection the next token is drawn from norm(max(0, p_i - q_i)); when
    all k are accepted, a bonus token is drawn from p_k. `q=None` means a
    deterministic drafter (q one-hot at the draft).
    """
    k = draft.shape[0]
    accept_key, residual_key = mx.random.split(key)
    if k == 0:
        return mx.array(0), mx.random.categorical(mx.log(p[0]), key=residual_key)
    if q is None:
        q = (mx.arange(p.shape[-1])[None, :] == draft[:, None]).astype(mx.float32)
    idx = draft[:, None].astype(mx.int32)
    p_draft = mx.take_along_axis(p[:k], idx, axis=-1)[:, 0]
    q_draft = mx.take_along_axis(q, idx, axis=-1)[:, 0]
    u = mx.random.uniform(shape=(k,), key=accept_key)
    # u < p/q written without the division, so q(x) = 0 cannot produce NaN
    accepts = (u * q_draft < p_draft).astype(mx.int32)
    accepted = mx.cumprod(accepts).sum()
    return accepted, mx.random.categorical(mx.log(next_distribution(p, q, accepted)), key=residual_key)


def next_distribution(p: mx.array, q: mx.array, accepted: mx.array) -> mx.array:
    """What the token after `accepted` drafts is drawn from (unnormalised).

    After rejecting draft i < k: the residual max(0, p_i - q_i). After all k
    were accepted: the bonus row p_k. When p and q agree so closely that the
    residual is all zero, p_i itself: a rejection is then (almost) never
    drawn, and p_i is the law the target would have sampled from anyway.
    """
    k = q.shape[0]
    rows = mx.concatenate([mx.maximum(p[:k] - q, 0.0), p[k:]], axis=0)
    chosen = mx.take(rows, accepted, axis=0)
    return mx.where(chosen.sum() > 0, chosen, mx.take(p, accepted, axis=0))


def acceptance_chance(p: mx.array | None, logits: mx.array, q: mx.array | None, token: mx.array) -> mx.array:
    """The chance that `token`, drawn from `q` (None: deterministic), would be
    accepted at a position where the target's logits are `logits` (V,) and,
    above temperature 0, its warped distribution is `p` (V,): 1 or 0 at
    temperature 0 (`p` None), min(1, p(x) / q(x)) above it. Its mean over
    draws is the acceptance rate sum(min(p, q)); nothing is drawn."""
    if p is None:
        return (mx.argmax(logits) == token).astype(mx.float32)
    p_token = p[token]
    if q is None:
        return p_token
    return mx.minimum(p_token / mx.maximum(q[token], 1e-30), 1.0)
