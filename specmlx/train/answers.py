"""The target's own greedy answers, with their hidden states, many prompts at once.

An MTP head drafts the target's answers, so those answers are its best
training data. The hidden states the head reads are the ones greedy decoding
computes anyway: each decode step keeps them, so no second prefill is needed.
mlx-lm's batch generator returns tokens only, so this is a small batched
greedy loop of its own on mlx-lm's left-padded `BatchKVCache`; a row leaves
the batch when it ends.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Collection, Iterator, Sequence

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.cache import BatchKVCache

from ..errors import SpecmlxError
from ..hidden import decoder_taps, head, text_model
from ..prompting import PromptRow, encode_prompts, has_chat_template
from .features import ANSWER, CONTEXT, PAD, Window


@dataclass(frozen=True)
class Answer:
    tokens: list[int]  # the request in the chat template, then the answer
    answer_start: int  # index of the answer's first token
    hidden: mx.array  # (len(tokens), H) float16: the target's final-normed hidden states
    taps: mx.array | None = None  # (len(tokens), T, H) float16: what enters each tapped layer


def prompt_tokens(tokenizer: Any, request: PromptRow) -> list[int]:
    """The request as every front end encodes it (the bench's too), so the head trains on the ids it drafts for."""
    return list(encode_prompts([request], tokenizer, has_chat_template(tokenizer))[0].tokens)


def answer_batch(model: nn.Module, tokenizer: Any, requests: Sequence[PromptRow], max_tokens: int,
                 max_prompt: int, stops: Collection[int], taps: tuple[int, ...] = ()) -> list[Answer]:
    """Greedy answers to `requests`, in their order, each ending before a token of `stops`, with
    what enters each of the `taps` layers too. Prompts longer than `max_prompt` keep their end."""
    prompts = [prompt_tokens(tokenizer, r)[-max_prompt:] for r in requests]
    width = max(map(len, prompts))
    pads = [width - len(p) for p in prompts]
    layers = len(text_model(model).layers)
    cache = [BatchKVCache(pads) for _ in range(layers)]
    hidden, tapped = decoder_taps(model, mx.array([[0] * pad + p for pad, p in zip(pads, prompts)]), cache, taps)
    rows = list(range(len(prompts)))  # live rows -> request index
    tokens = [list(p) for p in prompts]
    states = [[_kept(hidden, tapped, i, pads[i])] for i in range(len(prompts))]
    nxt = mx.argmax(head(model, hidden[:, -1]), axis=-1)
    for _ in range(max_tokens):
        mx.eval(nxt, *(array for s in states for array in s[-1] if array is not None))
        chosen = nxt.tolist()
        for row, token in zip(rows, chosen):
            tokens[row].append(token)
        keep = [i for i, (row, token) in enumerate(zip(rows, chosen))
                if token not in stops and len(tokens[row]) - len(prompts[row]) < max_tokens]
        if len(keep) < len(rows):
            if not keep:
                break
            for c in cache:
                c.filter(mx.array(keep))
            nxt = nxt[mx.array(keep)]
            rows = [rows[i] for i in keep]
        hidden, tapped = decoder_taps(model, nxt[:, None], cache, taps)
        for i, row in enumerate(rows):
            states[row].append(_kept(hidden, tapped, i, 0))
        nxt = mx.argmax(head(model, hidden[:, -1]), axis=-1)
    # A row's last token (its end, or the token at the limit) was never fed: no hidden state.
    return [_answer(tokens[row][: sum(h.shape[0] for h, _ in states[row])], len(prompt), states[row])
            for row, prompt in enumerate(prompts)]


def _kept(hidden: mx.array, tapped: mx.array | None, row: int, start: int) -> tuple[mx.array, mx.array | None]:
    """One row's new hidden states (and taps) from `start` on, as stored: float16."""
    taps = None if tapped is None else tapped[row, start:].astype(mx.float16)
    return hidden[row, start:].astype(mx.float16), taps


def _answer(tokens: list[int], answer_start: int, states: list[tuple[mx.array, mx.array | None]]) -> Answer:
    hidden = mx.concatenate([h for h, _ in states])
    taps = None if states[0][1] is None else mx.concatenate([t for _, t in states])
    return Answer(tokens, answer_start, hidden, taps)


def answers(model: nn.Module, tokenizer: Any, requests: Sequence[PromptRow], max_tokens: int, max_prompt: int,
            batch_size: int, stops: Collection[int], taps: tuple[int, ...] = ()) -> Iterator[Answer]:
    """Answers to every request, in order, `batch_size` at a time (each batch sorted by
    prompt length, so little of it is padding)."""
    for start in range(0, len(requests), batch_size):
        batch = list(requests[start : start + batch_size])
        order = sorted(range(len(batch)), key=lambda i: len(batch[i].prompt))
        done = answer_batch(model, tokenizer, [batch[i] for i in order], max_tokens, max_prompt, stops, taps)
        by_request = {i: a for i, a in zip(order, done)}
        yield from (by_request[i] for i in range(len(batch)))


def answer_windows(model: nn.Module, tokenizer: Any, requests: Sequence[PromptRow], length: int, max_tokens: int,
                   batch_size: int, stops: Collection[int], taps: tuple[int, ...] = ()
                   ) -> Callable[[int], Iterator[Window]]:
    """`collect`'s window source: one answer per window (request, then answer, then padding)."""
    if max_tokens >= length:
        raise SpecmlxError(f"answers of {max_tokens} tokens do not fit windows of {length}")

    def make(skip: int) -> Iterator[Window]:
        for a in answers(model, tokenizer, requests[skip:], max_tokens, length - max_tokens, batch_size, stops, taps):
            pad = length - len(a.tokens)
            mask = [CONTEXT] * a.answer_start + [ANSWER] * (len(a.tokens) - a.answer_start) + [PAD] * pad
            yield Window(a.tokens + [0] * pad, mask, _padded(a.hidden, pad), None if a.taps is None else _padded(a.taps, pad))

    return make


def _padded(states: mx.array, pad: int) -> mx.array:
    return mx.concatenate([states, mx.zeros((pad, *states.shape[1:]), dtype=states.dtype)])
