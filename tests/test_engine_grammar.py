"""Under a grammar, greedy output is plain constrained decoding's, token for token, whatever drafts."""

from __future__ import annotations

import json
from dataclasses import replace

import llguidance
import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.models.cache import make_prompt_cache
from mlx_lm.tokenizer_utils import TokenizerWrapper
from scipy.stats import chisquare

import specmlx.round as round_module
from specmlx.drafters import Draft, ModelDrafter, NoDrafter, PromptLookupDrafter
from specmlx.drafters.block import BlockDrafter
from specmlx.drafters.mtp import MTPDrafter
from specmlx.engine import Engine, GenerationConfig
from specmlx.grammar import Constraint, Grammar, grammar_tokenizer
from specmlx.policy import DraftPolicy
from specmlx.sampling import SamplingParams, warp
from specmlx.vocab import vocab_size

from . import tiny, tiny_block
from .test_engine import PROMPTS
from .test_grammar import CLOSE, EOS, LARK, TOKENS, ToyTokenizer

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
    grammar = Grammar.json_schema(SCHEMA, laid_out=False)  # a random model would indent forever
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


# -- above temperature 0: the target's distribution restricted to the grammar --------------------------


LENGTH, RUNS = 4, 2000
TOY_PROMPT = [6, 2, 6, 3]
SAMPLING = SamplingParams(temp=1.0)


@pytest.fixture(scope="module")
def toy():
    args = tiny.qwen2_args(len(TOKENS), layers=1)
    target = tiny.build(args, seed=7, sharpness=2.0)
    lltok = llguidance.LLTokenizer(llguidance.TokenizerWrapper(ToyTokenizer()), n_vocab=len(TOKENS))
    return target, tiny.perturbed(target, args, noise=0.6, seed=8), lltok


@pytest.fixture(scope="module")
def toy_head():
    """An MTP head that drafts from 4 of the 8 tokens ({, a, the comma, the space), as a trained head's draft
    vocabulary does: after "}" the grammar allows only the end token, which the head cannot draft."""
    return tiny.mtp(tiny.qwen2_args(len(TOKENS), layers=1), seed=9, draft_vocab=4)


def toy_drafter(kind: str, toy, toy_head):
    return ModelDrafter(toy[1], len(TOKENS)) if kind == "model" else MTPDrafter(toy_head, len(TOKENS))


def restricted(target, constraint: Constraint, prefix: list[int]) -> np.ndarray:
    """The target's next-token distribution after `prefix`, restricted to what the grammar allows."""
    logits = target(mx.array([TOY_PROMPT + prefix]))[0, -1]
    allowed = constraint.masks([])[0]
    return np.array(mx.exp(warp(mx.where(allowed, logits, -mx.inf), SAMPLING)), dtype=np.float64)


def exact_constrained(target, lltok, lark: str = LARK, eos: int = EOS) -> dict[tuple[int, ...], float]:
    """P(answer) for every answer of at most LENGTH tokens (ending in `eos`, or cut at LENGTH)."""
    out: dict[tuple[int, ...], float] = {}
    constraint = Constraint(Grammar.lark(lark), lltok)

    def walk(prefix: list[int], prob: float) -> None:
        if len(prefix) == LENGTH:
            out[tuple(prefix)] = prob
            return
        p = restricted(target, constraint, prefix)
        for token in map(int, np.flatnonzero(p > 0)):
            if token == eos:  # the answer ends (and the matcher would not count it to roll back)
                out[tuple(prefix + [token])] = prob * p[token]
                continue
            constraint.advance([token])
            walk(prefix + [token], prob * p[token])
            constraint.matcher.rollback(1)

    walk([], 1.0)
    return out


def toy_config(seed: int, policy: DraftPolicy = DraftPolicy(num_draft=3), lark: str = LARK) -> GenerationConfig:
    return GenerationConfig(max_tokens=LENGTH, sampling=SAMPLING, grammar=Grammar.lark(lark), policy=policy,
                            seed=seed)


def sampled(monkeypatch, target, drafter, lltok, policy: DraftPolicy = DraftPolicy(num_draft=3),
            runs: int = RUNS, lark: str = LARK, eos: int = EOS) -> list[tuple[int, ...]]:
    monkeypatch.setattr("specmlx.engine.grammar_tokenizer", lambda tokenizer, width, eos: lltok)
    engine = Engine(target, drafter, eos_token_ids=[eos])
    samples = []
    for seed in range(runs):
        generation = engine.generate(TOY_PROMPT, toy_config(seed, policy, lark))
        tokens = [e.token for e in generation.token_events()]
        samples.append(tuple(tokens) + ((eos,) if generation.stats.finish_reason == "eos" else ()))
    return samples


def sampled_in_batches(monkeypatch, target, drafter, lltok, rows: int = 8, runs: int = RUNS) -> list[tuple[int, ...]]:
    """The same answers, `rows` at a time in a continuous batch, each with its own seed and drafter."""
    from specmlx.batch import Batch, Member
    from specmlx.caches.stream import make_cache

    monkeypatch.setattr("specmlx.engine.grammar_tokenizer", lambda tokenizer, width, eos: lltok)
    samples = []
    for first in range(0, runs, rows):
        batch, out = Batch(target, len(make_cache(target)), max_rows=rows), {}
        for seed in range(first, first + rows):
            member = Member(Engine(target, drafter.fresh(), eos_token_ids=[EOS]), TOY_PROMPT, toy_config(seed))
            batch.add(member)
            out[member] = []
        while batch.members:
            for member, event in batch.step():
                out[member] += [t.token for t in event.tokens]
        samples += [tuple(tokens) + ((EOS,) if m.stats.finish_reason == "eos" else ()) for m, tokens in out.items()]
    return samples


def pvalue(samples, probs) -> float:
    if not set(samples) <= set(probs):  # an answer the grammar forbids
        return 0.0
    total = sum(probs.values())  # 1 but for rounding
    expect = {s: p / total * len(samples) for s, p in probs.items()}
    big = [s for s in expect if expect[s] >= 5]
    small = [s for s in expect if expect[s] < 5]
    observed = [samples.count(s) for s in big] + ([sum(samples.count(s) for s in small)] if small else [])
    expected = [expect[s] for s in big] + ([sum(expect[s] for s in small)] if small else [])
    return chisquare(observed, expected).pvalue


@pytest.mark.parametrize("kind", ["model", "mtp"])
def test_sampled_answers_follow_the_targets_distribution_restricted_to_the_grammar(monkeypatch, toy, toy_head,
                                                                                    kind):
    target, _, lltok = toy
    samples = sampled(monkeypatch, target, toy_drafter(kind, toy, toy_head), lltok)
    assert pvalue(samples, exact_constrained(target, lltok)) > 1e-3


@pytest.fixture(scope="module")
def toy_block():
    """A block drafter over a two-layer toy target: it reads what leaves the first layer."""
    args = tiny.qwen2_args(len(TOKENS), layers=2)
    model, _ = tiny_block.tiny_dflash(len(TOKENS), seed=9, tapped=(0,), target_layers=2)
    return tiny.build(args, seed=7, sharpness=2.0), BlockDrafter(model, len(TOKENS), "dflash")


def test_a_block_drafters_answers_follow_it_too(monkeypatch, toy, toy_block):
    """Each position of its block draws from its distribution masked as the grammar masks the
    target's, after the tokens drafted before it (in a batch: a row draws as a generation alone does)."""
    (_, _, lltok), (target, drafter) = toy, toy_block
    samples = sampled_in_batches(monkeypatch, target, drafter, lltok)
    assert pvalue(samples, exact_constrained(target, lltok)) > 1e-3


def test_with_a_p_min_too(monkeypatch, toy, toy_head):
    target, _, lltok = toy
    samples = sampled(monkeypatch, target, toy_drafter("model", toy, toy_head), lltok,
                      DraftPolicy(num_draft=3, p_min=0.4))
    assert pvalue(samples, exact_constrained(target, lltok)) > 1e-3


@pytest.mark.parametrize("kind", ["model", "mtp"])
def test_rows_of_a_batch_follow_it_too(monkeypatch, toy, toy_head, kind):
    target, _, lltok = toy
    samples = sampled_in_batches(monkeypatch, target, toy_drafter(kind, toy, toy_head), lltok)
    assert pvalue(samples, exact_constrained(target, lltok)) > 1e-3


def test_the_batch_check_detects_a_sampled_draft_cut_at_its_first_forbidden_token(monkeypatch, toy):
    """Negative control of the batch's check: rows drafting from q unmasked, each draft cut where the
    grammar forbids a token."""
    import specmlx.batch.round as batch_round

    target, drafter, lltok = toy
    honest = batch_round.constrain_all
    monkeypatch.setattr(Constraint, "after", lambda self, drafted: mx.ones((self.width,), dtype=mx.bool_))

    def cutting(members, proposals, shared=()):
        cut = []
        for m, proposed in zip(members, proposals):
            draft = proposed.draft
            n = m.constraint.allowed(draft.tokens.tolist()) if draft.size else 0
            probs = None if draft.probs is None else draft.probs[:n]
            cut.append(replace(proposed, draft=Draft(draft.tokens[:n], probs)))
        return honest(members, cut, shared)

    monkeypatch.setattr(batch_round, "constrain_all", cutting)
    samples = sampled_in_batches(monkeypatch, target, ModelDrafter(drafter, len(TOKENS)), lltok)
    assert pvalue(samples, exact_constrained(target, lltok)) < 1e-3


def test_a_draft_ends_where_the_drafter_scores_nothing_the_grammar_allows():
    """A head's draft vocabulary may hold nothing the grammar allows: q would be empty (NaN), so the draft
    ends before that step, whatever was asked."""
    from specmlx.drafters.loop import Scores, draft_loop

    width, only = 8, 5
    logits = mx.where(mx.arange(width) == only, 0.0, -mx.inf)  # the drafter scores token 5 alone
    step = lambda fed, state, greedy: (Scores(logits), state)  # noqa: E731
    allowing = lambda after: lambda drafted: mx.arange(width) != only if len(drafted) >= after else mx.ones(  # noqa: E731
        (width,), dtype=mx.bool_)
    for temp in (0.0, 1.0):
        sampling, key = SamplingParams(temp=temp), mx.random.key(0)
        first = mx.array([1], dtype=mx.uint32)
        assert draft_loop(step, first, None, 4, sampling, key, 0.0, allowing(0)).size == 0
        draft = draft_loop(step, first, None, 4, sampling, key, 0.0, allowing(2))
        assert draft.tokens.tolist() == [only, only]
        assert draft.probs is None or not mx.any(mx.isnan(draft.probs)).item()


def test_the_check_detects_a_sampled_draft_cut_at_its_first_forbidden_token(monkeypatch, toy):
    """Negative control: a drafter that draws from its whole distribution (q not masked), its draft cut
    where the grammar forbids a token (as a copy is cut): the draft's length then depends on a draw nobody
    verifies."""
    target, drafter, lltok = toy
    plant_cut_drafts(monkeypatch)
    samples = sampled(monkeypatch, target, ModelDrafter(drafter, len(TOKENS)), lltok)
    assert pvalue(samples, exact_constrained(target, lltok)) < 1e-3


def plant_cut_drafts(monkeypatch) -> None:
    """The planted bias: a drafter's draws unmasked, its draft cut at the first token the grammar forbids."""
    honest = round_module.proposal
    monkeypatch.setattr(Constraint, "after", lambda self, drafted: mx.ones((self.width,), dtype=mx.bool_))

    def cutting(state, plan, key):
        proposed, masks = honest(state, plan, key)
        draft = proposed.draft
        if proposed.looked_up or state.constraint is None or not draft.size:
            return proposed, masks
        n = state.constraint.allowed(draft.tokens.tolist())
        cut = Draft(draft.tokens[:n], None if draft.probs is None else draft.probs[:n])
        return replace(proposed, draft=cut), masks[: n + 1]

    monkeypatch.setattr(round_module, "proposal", cutting)


def test_rows_of_a_batch_keep_their_own_grammars(tokenizer, vocab, target, noisy_drafter):
    """Rows with the grammar and without, drafting together: each as plain constrained (or plain) decoding."""
    from specmlx.batch import Batch, Member
    from specmlx.caches.stream import make_cache

    from .test_engine import reference_greedy

    eos = {tokenizer.eos_token_id}
    wrapper, grammar = TokenizerWrapper(tokenizer), Grammar.json_schema(SCHEMA, laid_out=False)
    batch = Batch(target, len(make_cache(target)), max_rows=6)
    expected, outputs = {}, {}
    for i, text in enumerate(PROMPTS * 2):
        prompt = tokenizer.encode(text)
        constrained = i % 2 == 0
        drafter = ModelDrafter(noisy_drafter, vocab) if i < 3 else PromptLookupDrafter()
        config = GenerationConfig(max_tokens=MAX_TOKENS, grammar=grammar if constrained else None,
                                  policy=DraftPolicy(num_draft=2, lookup=2))
        member = Member(Engine(target, drafter, wrapper, eos_token_ids=eos), prompt, config)
        batch.add(member)
        own = reference_greedy(target, prompt, MAX_TOKENS)
        own = own[: next((j for j, t in enumerate(own) if t in eos), len(own))]  # the engine stops at eos
        expected[member] = constrained_greedy(target, tokenizer, prompt, grammar, eos) if constrained else own
        outputs[member] = []
    while batch.members:
        for member, event in batch.step():
            outputs[member] += [t.token for t in event.tokens]
    for member, tokens in outputs.items():
        assert tokens == expected[member]
    assert batch.widest == 6



@pytest.mark.parametrize("where", ["alone", "batch"])
def test_a_drafter_draws_only_what_the_grammar_allows(monkeypatch, toy, where):
    """q masked as p is: every drafted token is one the grammar allows where it stands."""
    target, drafter, lltok = toy
    checked, honest = [], Constraint.masks

    def recording(self, draft):
        rows = honest(self, draft)
        checked.extend(bool(rows[i][t]) for i, t in enumerate(draft) if t != EOS)
        return rows

    monkeypatch.setattr(Constraint, "masks", recording)
    run = sampled if where == "alone" else sampled_in_batches
    run(monkeypatch, target, ModelDrafter(drafter, len(TOKENS)), lltok, runs=96)
    assert len(checked) > 100 and all(checked)


# Five schemas of our own, each with finite answers (a random model's must end), for the validity run.
SCHEMAS = [
    SCHEMA,
    {"type": "object", "properties": {"tags": {"type": "array", "items": {"enum": ["x", "y", "z"]}, "maxItems": 3}},
     "required": ["tags"], "additionalProperties": False},
    {"type": "object", "properties": {"point": {"type": "object", "properties": {
        "x": {"type": "integer", "minimum": -9, "maximum": 9}, "y": {"type": "integer", "minimum": -9, "maximum": 9}},
        "required": ["x", "y"], "additionalProperties": False}, "label": {"type": "string", "maxLength": 3}},
     "required": ["point", "label"], "additionalProperties": False},
    {"type": "object", "properties": {"value": {"anyOf": [{"type": "boolean"}, {"type": "null"},
                                                           {"enum": ["none", "some"]}]}},
     "required": ["value"], "additionalProperties": False},
    {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9}, "minItems": 1, "maxItems": 4},
]


def test_every_sampled_answer_parses_and_validates(tokenizer, vocab, target, noisy_drafter):
    """200 seeded answers at temperature 1, 40 per schema, drafted by a model: each is JSON its schema
    validates (checked by jsonschema, not by the library that constrained it)."""
    import jsonschema

    eos = {tokenizer.eos_token_id}
    engine = Engine(target, ModelDrafter(noisy_drafter, vocab), TokenizerWrapper(tokenizer), eos_token_ids=eos)
    prompt = tokenizer.encode(PROMPTS[0])
    for i, schema in enumerate(SCHEMAS):
        grammar = Grammar.json_schema(schema, laid_out=False)
        for seed in range(40):
            config = GenerationConfig(max_tokens=128, grammar=grammar, seed=1000 * i + seed,
                                      sampling=SamplingParams(temp=1.0), policy=DraftPolicy(num_draft=3))
            generation = engine.generate(prompt, config)
            tokens = [e.token for e in generation.token_events()]
            assert generation.stats.finish_reason == "eos", (i, seed)
            jsonschema.validate(json.loads(tokenizer.decode(tokens)), schema)


# -- a probe under a grammar: drafted as a draft is, q masked as p is ------------------------------------


NO_CLOSE = 'start: "{" ("a" | "b")*'  # "}" is never allowed


class Contrary(NoDrafter):
    """A drafter that prefers "}" to every other token, by far, wherever it drafts."""

    name, drafts = "contrary", True

    def fresh(self) -> "Contrary":
        return Contrary()

    def draft(self, tokens, num_draft, sampling, key, p_min=0.0, allowed=None) -> Draft:
        from specmlx.drafters.loop import Scores, draft_loop

        logits = mx.where(mx.arange(len(TOKENS)) == CLOSE, 30.0, 0.0)
        step = lambda fed, state, greedy: (Scores(logits), state)  # noqa: E731
        first = mx.array(tokens[-1:], dtype=mx.uint32)
        return draft_loop(step, first, None, num_draft, sampling, key, p_min, allowed)


def probing_config(seed: int) -> GenerationConfig:
    return GenerationConfig(max_tokens=6, sampling=SAMPLING, grammar=Grammar.lark(NO_CLOSE), seed=seed)


def test_a_probe_is_drafted_under_the_grammar(monkeypatch, toy):
    """Every round probes a drafter that would draw "}", which the grammar never allows: unmasked, its
    probe's chance would be 0 every time; masked as a draft is, it draws what the grammar allows, which
    the target may take (the first round's "{" is the only token allowed: its chance is 1)."""
    from .schedules import Probing

    target, _, lltok = toy
    monkeypatch.setattr("specmlx.engine.grammar_tokenizer", lambda tokenizer, width, eos: lltok)
    monkeypatch.setattr("specmlx.decoding.schedule_for", lambda engine, policy: Probing())
    engine = Engine(target, Contrary(), eos_token_ids=[EOS])
    for seed in range(4):
        chances = [event.probe for event in engine.generate(TOY_PROMPT, probing_config(seed))]
        assert chances[0] == pytest.approx(1.0)
        assert all(chance is not None and chance > 0 for chance in chances), chances


def test_a_batch_rows_probe_is_too(monkeypatch, toy):
    """So in a batch: a row under a grammar draws alone (a shared drafter serves none), as a round does."""
    from specmlx.batch import Batch, Member
    from specmlx.caches.stream import make_cache

    from .schedules import Probing

    target, _, lltok = toy
    monkeypatch.setattr("specmlx.engine.grammar_tokenizer", lambda tokenizer, width, eos: lltok)
    monkeypatch.setattr("specmlx.decoding.schedule_for", lambda engine, policy: Probing())
    batch, chances = Batch(target, len(make_cache(target)), max_rows=3), {}
    for seed in range(3):
        member = Member(Engine(target, Contrary(), eos_token_ids=[EOS]), TOY_PROMPT, probing_config(seed))
        batch.add(member)
        chances[member] = []
    while batch.members:
        for member, event in batch.step():
            chances[member].append(event.probe)
    for probes in chances.values():
        assert probes[0] == pytest.approx(1.0)
        assert all(chance is not None and chance > 0 for chance in probes), probes
