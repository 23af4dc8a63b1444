"""The warp shared by target and drafter: mlx-lm's filters, temperature, float32."""

import math

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.sample_utils import make_sampler
from scipy.stats import chisquare

from specmlx.errors import SpecmlxError
from specmlx.sampling import SamplingParams, warp

LOGITS = mx.array([2.0, 1.5, 1.0, 0.2, -1.0, -3.0], dtype=mx.bfloat16)


def probs(params: SamplingParams) -> np.ndarray:
    return np.exp(np.array(warp(LOGITS, params).tolist(), dtype=np.float64))


def test_temperature_scales_the_softmax():
    got = probs(SamplingParams(temp=0.5))
    want = np.exp(np.array(LOGITS.tolist()) / 0.5)
    np.testing.assert_allclose(got, want / want.sum(), rtol=1e-5)


def test_warp_computes_in_float32():
    assert warp(LOGITS, SamplingParams(temp=1.0)).dtype == mx.float32


@pytest.mark.parametrize(
    "params, kept",
    [
        (SamplingParams(temp=1.0, top_k=2), 2),
        (SamplingParams(temp=1.0, top_p=0.5), 2),
        (SamplingParams(temp=1.0, min_p=0.3), 3),
        (SamplingParams(temp=1.0, top_k=100), 6),  # top-k past the vocabulary keeps all
    ],
)
def test_filters_keep_the_most_likely_tokens(params, kept):
    got = probs(params)
    assert (got > 0).sum() == kept
    assert np.all(got[:kept] > 0)
    assert math.isclose(got.sum(), 1.0, rel_tol=1e-5)


@pytest.mark.parametrize(
    "params",
    [SamplingParams(temp=0.7), SamplingParams(temp=1.0, top_p=0.8), SamplingParams(temp=1.3, top_k=3, min_p=0.05)],
)
def test_same_distribution_as_mlx_lm_sampler(params):
    """Plain decoding here samples what mlx-lm's own sampler samples."""
    sampler = make_sampler(temp=params.temp, top_p=params.top_p, top_k=params.top_k, min_p=params.min_p)
    logprobs = LOGITS.astype(mx.float32) - mx.logsumexp(LOGITS.astype(mx.float32))
    mx.random.seed(0)
    draws = mx.stack([sampler(logprobs[None])[0] for _ in range(6000)])
    counts = np.bincount(np.array(draws.tolist()), minlength=6)
    p = probs(params)
    assert counts[p == 0].sum() == 0
    expected = p[p > 0] / p[p > 0].sum() * 6000
    assert chisquare(counts[p > 0], expected).pvalue > 1e-3


@pytest.mark.parametrize("kwargs", [{"temp": -0.1}, {"temp": math.nan}, {"top_p": 0}, {"top_p": 1.5}, {"top_k": -1}, {"min_p": 2}])
def test_bad_parameters_are_refused(kwargs):
    with pytest.raises(SpecmlxError):
        SamplingParams(**kwargs)
