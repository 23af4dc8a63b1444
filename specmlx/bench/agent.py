"""What an agent's answer costs the host a round beside decoding: `python -m specmlx.bench.agent`.

A thinking model's reasoning is split from its answer as the text arrives (`serve/reasoning.py`), and
a forced call is held to the model's syntax by a grammar (`serve/syntaxes.py`), whose masks the round
computes for every position it verifies. Both are host work, which decides speed on a Mac, where a
4-bit step takes milliseconds, and is hidden here under a float32 step of a second. So they are
timed on a skeleton of Qwen3.5-4B's target (its 32 layers and layer pattern, tiny widths, random
weights; `bench/block.py`'s), with the vocabulary and tokenizer of a fetched preset (Qwen2.5-Coder's,
151,665 entries: Qwen3.5's own is not fetched here). Interleaved and repeated, medians printed:

- a round of greedy decoding drafting 4 by prompt lookup, alone and under a forced call in
  Qwen3-Coder's XML syntax (`tool_choice: required`, the bench's tool prompts' tools), and in
  Qwen2.5's JSON one for comparison: the difference is the grammar's host work a round;
- the reasoning split of those answers' text, round by round, as a server reads it.
"""

from __future__ import annotations

import argparse
import json
import statistics
from time import perf_counter
from typing import Sequence

import mlx.core as mx
from mlx_lm.models import qwen3_5

from ..drafters import PromptLookupDrafter
from ..engine import Engine, GenerationConfig
from ..errors import SpecmlxError
from ..loading import load_tokenizer
from ..policy import DraftPolicy
from ..presets import default_preset_name, get_preset, model_path
from ..prompting import packaged_prompts_path
from ..serve.openai.protocol import ChatRequest
from ..serve.reasoning import ReasoningReader
from ..serve.syntaxes import SYNTAXES
from ..serve.tools import call_grammar, chosen
from ..vocab import vocab_size
from .block import target_config
from .skeleton import randomize

NEW_TOKENS = 64


def tools() -> list[dict]:
    """The tools of the bench's tool-call prompts (`bench/tools.jsonl`), each once."""
    rows = [json.loads(line) for line in packaged_prompts_path().with_name("tools.jsonl").read_text().splitlines()]
    named = {t["function"]["name"]: t for row in rows for t in row.get("tools", [])}
    return list(named.values())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specmlx.bench.agent", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5, help="runs of each, medians printed (default 5)")
    args = parser.parse_args(argv)
    path = model_path(get_preset(default_preset_name()))
    if not (path / "tokenizer.json").exists():
        raise SpecmlxError(f"the default preset's tokenizer is not here ({path}): run `specmlx models fetch` first")
    tokenizer = load_tokenizer(default_preset_name(), path)
    config = target_config()
    config["text_config"]["vocab_size"] = len(tokenizer.vocab)
    target = qwen3_5.Model(qwen3_5.ModelArgs.from_dict(config))
    randomize(target, seed=1)
    request = ChatRequest(model="m", messages=[{"role": "user", "content": "Go."}], tools=tools(), tool_choice="required")
    grammars = {name: call_grammar(SYNTAXES[name], tokenizer, chosen(request.tools, "required"), False)
                for name in ("qwen3_coder", "json_tools")}
    prompt = tokenizer.encode("Read the settings file and tell me what the server's port is.")
    engine = Engine(target, PromptLookupDrafter(), tokenizer)
    runs = {"plain": GenerationConfig(max_tokens=NEW_TOKENS, policy=DraftPolicy(num_draft=4)),
            "XML call": GenerationConfig(max_tokens=NEW_TOKENS, policy=DraftPolicy(num_draft=4),
                                         grammar=grammars["qwen3_coder"]),
            "JSON call": GenerationConfig(max_tokens=NEW_TOKENS, policy=DraftPolicy(num_draft=4),
                                          grammar=grammars["json_tools"])}
    for run in runs.values():  # the prompt prefilled, and each path warmed, before anything is timed
        list(engine.generate(prompt, run))
    per_round = {name: [] for name in runs}
    split_us, texts = [], []
    for _ in range(args.repeats):  # interleaved, so that drift hits every figure alike
        for name, run in runs.items():
            start = perf_counter()
            generation = engine.generate(prompt, run)
            rounds = [event.text for event in generation]
            per_round[name].append((perf_counter() - start) / len(rounds))
            texts.append(rounds)
        for rounds in texts[-len(runs):]:
            reader = ReasoningReader("<think>", "</think>", thinking=True)
            start = perf_counter()
            for text in rounds:
                reader.feed(text)
            reader.finish()
            split_us.append(1e6 * (perf_counter() - start) / len(rounds))
    plain, xml, json_call = (1000 * statistics.median(per_round[name]) for name in runs)
    print(f"skeleton of Qwen3.5-4B's target ({config['text_config']['num_hidden_layers']} layers), vocabulary "
          f"{vocab_size(target):,} (the default preset's tokenizer); {NEW_TOKENS} tokens, prompt lookup drafting 4; "
          f"medians of {args.repeats}")
    print(f"a round: plain {plain:.2f} ms; under a forced call ({len(request.tools)} tools) in Qwen3-Coder's XML "
          f"{xml:.2f} ms ({xml - plain:+.2f} ms: the grammar's host work), in Qwen2.5's JSON {json_call:.2f} ms "
          f"({json_call - plain:+.2f} ms)")
    print(f"the reasoning split: {statistics.median(split_us):.1f} us a round")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
