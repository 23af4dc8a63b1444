"""From a request to a job: the draft policy and defaults a request does not set, and the window's room."""

from __future__ import annotations

import pytest

from specmlx.policy import DraftPolicy
from specmlx.sampling import SamplingParams
from specmlx.serve.errors import APIError
from specmlx.serve.openai.protocol import ChatRequest
from specmlx.serve.serving import Defaults, make_job

DEFAULTS = Defaults("m", "small", DraftPolicy(num_draft=5), SamplingParams(0.3, 0.9), max_tokens=100)
LOADED = ["small", "mtp", "ngram", "none"]


def job(room: int | None = 1000, **fields):
    request = ChatRequest(model="m", messages=[{"role": "user", "content": "x"}], **fields)
    return make_job(request, [1, 2, 3], DEFAULTS, LOADED, room, 1003)


def test_unset_fields_take_the_servers_defaults():
    made = job()
    assert made.drafter == "small" and made.prompt == (1, 2, 3)
    assert made.config.policy == DraftPolicy(num_draft=5)
    assert made.config.sampling == SamplingParams(0.3, 0.9)
    assert made.config.max_tokens == 100 and made.config.seed is None
    assert job(room=40).config.max_tokens == 40  # never past the context window


def test_the_speculative_object_sets_drafter_length_auto_and_lookup():
    made = job(speculative={"drafter": "mtp", "num_draft": 2, "lookup": 3}, temperature=0, seed=4, stop="\n",
               max_completion_tokens=7)
    assert made.drafter == "mtp"
    assert made.config.policy == DraftPolicy(num_draft=2, lookup=3)
    assert made.config.sampling.temp == 0 and made.config.seed == 4
    assert made.config.stop == ("\n",) and made.config.max_tokens == 7
    assert job(speculative={"auto": True, "max_draft": 6}).config.policy.auto
    assert job(speculative={"auto": True, "max_draft": 6}).config.policy.max_draft == 6
    assert job(speculative={"auto": False}).config.policy.num_draft == 5
    assert job(speculative={"drafter": "default"}).drafter == "small"


def test_a_limit_past_the_window_is_cut_to_the_room_and_no_room_is_refused_before_it_queues():
    assert job(room=40, max_tokens=32000).config.max_tokens == 40
    assert job(room=40, max_completion_tokens=32000, max_tokens=8).config.max_tokens == 40
    assert job(room=40, max_tokens=40).config.max_tokens == 40
    with pytest.raises(APIError) as err:
        job(room=0, max_tokens=1)
    assert (err.value.status, err.value.code, err.value.param) == (400, "context_length_exceeded", "messages")
    assert "1003" in err.value.message


def test_a_requests_length_says_how_the_length_is_chosen_on_an_adaptive_server():
    adaptive = Defaults("m", "small", DraftPolicy.parse("5+adaptive+pmin=0.5"), max_tokens=100)
    request = ChatRequest(model="m", messages=[{"role": "user", "content": "x"}], speculative={"num_draft": 2})
    assert make_job(request, [1], adaptive, LOADED, None, None).config.policy == DraftPolicy(num_draft=2, p_min=0.5)
    request = ChatRequest(model="m", messages=[{"role": "user", "content": "x"}], speculative={"auto": True})
    assert make_job(request, [1], adaptive, LOADED, None, None).config.policy == DraftPolicy(num_draft=None, p_min=0.5)
    request = ChatRequest(model="m", messages=[{"role": "user", "content": "x"}], speculative={"lookup": 2})
    assert make_job(request, [1], adaptive, LOADED, None, None).config.policy == DraftPolicy.parse(
        "5+adaptive+pmin=0.5+lookup=2")
