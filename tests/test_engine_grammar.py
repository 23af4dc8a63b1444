"""Under a grammar, greedy output is plain constrained decoding's, token for token, whatever drafts."""

from __future__ import annotations

import json

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.models.cache import make_prompt_cache
from mlx_lm.tokenizer_utils import TokenizerWrapper

from specmlx.drafters import ModelDrafter, NoDrafter, PromptLookupDrafter
from specmlx.engine import Engine, GenerationConfig
from specmlx.grammar import Constraint, Grammar, grammar_tokenizer
from specmlx.policy import DraftPolicy
from specmlx.vocab import vocab_size

from .test_engine import PROMPTS

# Every answer is finite, so that a random model's ends within MAX_TOKENS.
SCHEMA = {"type": "object", "properties": {"kind": {"enum": ["add", "sub", "mul"]},
                                           "n": {"type": "integer", "minimum": 0, "maximum": 999},
                                           "tag": {"type": "string", "maxLength": 5}, "ok": {"type": "boolean"}},
          "required": ["kind", "n", "tag", "ok"], "additionalProperties": False}
MAX_TOKENS = 96


def constrained_greedy(target, tokenizer, prompt: list[int], grammar: Grammar, eos: set[int]) -> list[int]:
    """Plain constrained decoding: one token a forward, the argmax of what the grammar allows."""
    constraint = Constraint(grammar, grammar_tokenizer(tokenizer, vocab_size(target), eos))
    cache = make_prompt_cache(target)
    logits = target(mx.array(prompt)[None], cache=cache)[0, -1]
    out = []
    while len(out) < MAX_TOKENS:
        allowed = np.array(constraint.masks([])[0])
        token = int(np.argmax(np.where(allowed, np.array(logits, dtype=np.float32), -np.inf)))
        constraint.advance([token])
        if token in eos:
            break
        out.append(token)
        logits = target(mx.array([[token]]), cache=cache)[0, -1]
    return out


@pytest.mark.parametrize("drafter", ["none", "ngram", "model"])
def test_greedy_output_is_plain_constrained_decodings(tokenizer, vocab, target, noisy_drafter, drafter):
    eos = {tokenizer.eos_token_id}
    engine = Engine(target, {"none": NoDrafter(), "ngram": PromptLookupDrafter(),
                             "model": ModelDrafter(noisy_drafter, vocab)}[drafter], TokenizerWrapper(tokenizer),
                    eos_token_ids=eos)
    grammar = Grammar.json_schema(SCHEMA, any_whitespace=False)  # a random model would indent forever
    for text in PROMPTS:
        prompt = tokenizer.encode(text)
        expected = constrained_greedy(target, tokenizer, prompt, grammar, eos)
        generation = engine.generate(prompt, GenerationConfig(max_tokens=MAX_TOKENS, grammar=grammar,
                                                              policy=DraftPolicy(num_draft=3, lookup=2)))
        tokens = [e.token for e in generation.token_events()]
        assert tokens == expected, text
        answer = json.loads(tokenizer.decode(tokens))
        assert answer["kind"] in ("add", "sub", "mul") and 0 <= answer["n"] <= 999 and len(answer["tag"]) <= 5
        assert generation.stats.finish_reason == "eos"
