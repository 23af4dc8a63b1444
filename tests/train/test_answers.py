"""The target's own answers, batched: each equals its greedy decode alone, with its hidden states."""

import mlx.core as mx

from specmlx.hidden import decoder
from specmlx.train.answers import answer_batch, answer_windows, prompt_tokens
from specmlx.train.features import ANSWER, CONTEXT, PAD
from specmlx.prompting import PromptRow

from ..test_engine import reference_greedy

REQUESTS = [PromptRow("a", "code", "Write add."), PromptRow("b", "chat", "Explain speculative decoding to me, please."),
            PromptRow("c", "code", "x")]
STOPS = {2}  # the tiny tokenizer's <|im_end|>


def test_batched_answers_are_each_requests_greedy_answer(target, tokenizer):
    answers = answer_batch(target, tokenizer, REQUESTS, max_tokens=12, max_prompt=64, stops=STOPS)
    for request, answer in zip(REQUESTS, answers):
        prompt = prompt_tokens(tokenizer, request)
        assert answer.tokens[: answer.answer_start] == prompt
        alone = reference_greedy(target, prompt, 12)
        # The last generated token is never fed, so it has no hidden state and is left out.
        assert answer.tokens[answer.answer_start :] == alone[: len(answer.tokens) - answer.answer_start]
        assert len(answer.tokens) - answer.answer_start == 11 or alone[len(answer.tokens) - answer.answer_start] \
            in STOPS
        again = decoder(target, mx.array(answer.tokens)[None], None)[0]
        assert answer.hidden.shape == again.shape and answer.hidden.dtype == mx.float16
        assert mx.allclose(answer.hidden.astype(mx.float32), again, atol=2e-2, rtol=1e-2)


def test_an_answer_ends_before_its_end_token(target, tokenizer):
    first, other = answer_batch(target, tokenizer, REQUESTS[:2], max_tokens=6, max_prompt=64, stops=STOPS)
    # Both ran the full 6 tokens (the last, never fed, is left out): each has tokens to end on.
    mine, theirs = first.tokens[first.answer_start :], other.tokens[other.answer_start :]
    assert len(mine) == len(theirs) == 5
    # Make the first answer's third token an end token: that answer stops before it, the other goes on.
    stop = first.tokens[first.answer_start + 2]
    assert stop not in mine[:2]  # its first place: the answer ends on it, after two tokens
    short, same = answer_batch(target, tokenizer, REQUESTS[:2], max_tokens=6, max_prompt=64, stops={stop})
    assert short.tokens == first.tokens[: first.answer_start + 2]
    assert short.hidden.shape[0] == len(short.tokens)
    assert stop in other.tokens[other.answer_start :] or same.tokens == other.tokens
    if stop in theirs:  # then the other ends on it too
        assert same.tokens == other.tokens[: other.answer_start + theirs.index(stop)]
    # A second end token, the other answer's first token not among the first one's two: now
    # each row ends on an end token, the first after two tokens, the other where it meets one.
    j = next(j for j in range(1, 5) if theirs[j] not in theirs[:j] + mine[:2])
    ends = {stop, theirs[j]}
    at = next(i for i, token in enumerate(theirs) if token in ends)
    a, b = answer_batch(target, tokenizer, REQUESTS[:2], max_tokens=6, max_prompt=64, stops=ends)
    assert a.tokens == first.tokens[: first.answer_start + 2]
    assert b.tokens == other.tokens[: other.answer_start + at]
    assert b.hidden.shape[0] == len(b.tokens)


def test_answer_windows_mark_request_answer_and_padding(target, tokenizer):
    make = answer_windows(target, tokenizer, REQUESTS, length=96, max_tokens=8, batch_size=2, stops=STOPS)
    windows = list(make(1))  # skipping the first request, as a resumed collection does
    assert len(windows) == 2
    for request, window in zip(REQUESTS[1:], windows):
        prompt = prompt_tokens(tokenizer, request)
        n = len(prompt)
        assert len(window.tokens) == len(window.mask) == 96 and window.hidden.shape[0] == 96
        assert window.tokens[:n] == prompt and set(window.mask[:n]) == {CONTEXT}
        answer = window.mask[n:].index(PAD) + n
        assert set(window.mask[n:answer]) == {ANSWER} and set(window.mask[answer:]) == {PAD}
        assert not mx.any(window.hidden[answer:]).item()


def test_answers_keep_what_enters_the_tapped_layers(target, tokenizer):
    from specmlx.hidden import decoder_taps

    plain = answer_batch(target, tokenizer, REQUESTS, max_tokens=8, max_prompt=64, stops=STOPS)
    tapped = answer_batch(target, tokenizer, REQUESTS, max_tokens=8, max_prompt=64, stops=STOPS, taps=(0, 1))
    for alone, answer in zip(plain, tapped):
        assert answer.tokens == alone.tokens and alone.taps is None
        hidden, taps = decoder_taps(target, mx.array(answer.tokens)[None], None, (0, 1))
        assert answer.taps.shape == (len(answer.tokens), 2, hidden.shape[-1]) and answer.taps.dtype == mx.float16
        assert mx.allclose(answer.taps.astype(mx.float32), taps[0], atol=2e-2, rtol=1e-2)
