"""The request bodies and a job's records, without a server: what is accepted, what is refused and by name."""

from __future__ import annotations

import dataclasses

import pytest
from pydantic import ValidationError

from specmlx.engine import GenerationConfig
from specmlx.serve.jobs import Job
from specmlx.serve.openai.protocol import MAX_STOP, ChatRequest, CompletionRequest, Message

USER = [{"role": "user", "content": "hi"}]


def chat(**fields) -> ChatRequest:
    return ChatRequest(model="m", messages=USER, **fields)


def test_fields_that_change_nothing_are_ignored_and_ours_are_strict():
    assert chat(user="u", store=True, metadata={"a": 1}).model == "m"
    with pytest.raises(ValidationError):
        chat(speculative={"num_drafts": 4})  # a misspelt field of ours is an error, not a silent default
    for wrong in ({"temperature": "0.5"}, {"temperature": True}, {"max_tokens": 1.0}, {"stream": "yes"}):
        with pytest.raises(ValidationError):
            chat(**wrong)


@pytest.mark.parametrize("fields,param", [
    ({"n": 2}, "n"), ({"logprobs": True}, "logprobs"), ({"top_logprobs": 2}, "top_logprobs"),
    ({"frequency_penalty": 0.1}, "frequency_penalty"), ({"logit_bias": {"1": 5}}, "logit_bias"),
    ({"functions": [{"name": "f"}]}, "functions"), ({"function_call": "auto"}, "function_call"),
    ({"stop": [f"<{i}>" for i in range(MAX_STOP + 1)]}, "stop")])
def test_each_value_this_server_cannot_honour_is_refused_by_its_field(fields, param):
    assert chat(**fields).unsupported()[0] == param


def test_what_changes_nothing_is_not_refused():
    assert chat(n=1, logprobs=False, presence_penalty=0.0, tool_choice="none", response_format={"type": "text"},
                stop=[f"<{i}>" for i in range(MAX_STOP)]).unsupported() is None
    assert CompletionRequest(model="m", prompt=["one"], best_of=1).unsupported() is None
    assert CompletionRequest(model="m", prompt=["one", "two"]).unsupported()[0] == "prompt"
    assert CompletionRequest(model="m", prompt="x", echo=True).unsupported()[0] == "echo"
    assert CompletionRequest(model="m", prompt="x", suffix="").unsupported() is None  # fill in the middle
    assert CompletionRequest(model="m", prompt="x", suffix="y", echo=True).unsupported()[0] == "echo"


def test_stops_text_and_the_token_limit():
    assert chat(stop="\n").stops() == ("\n",) and chat(stop=["", "a"]).stops() == ("a",)
    assert Message(role="user", content=[{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]).text() == "ab"
    assert Message(role="assistant").text() == ""
    assert chat(max_tokens=5, max_completion_tokens=7).token_limit() == 7
    assert chat(max_tokens=5).token_limit() == 5


def test_a_job_is_a_frozen_record():
    job = Job((1, 2), GenerationConfig(max_tokens=3), "ngram")
    assert job.owner is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.drafter = "none"
