"""Golden generations: seeded runs on tiny random models must repeat byte for byte.

Every drafter kind (a noisy copy of the target, a random specmlx MTP head, a
random Gemma 4 assistant on a tiny Gemma 4 target, prompt lookup, none) x two
temperatures (0 and 0.8, seeded) x four draft policies (fixed, adaptive,
p-min with lookup, and the automatic length on fixed costs) generates from one
prompt, and each case's token ids, token sources and stats counts (no
timings) must equal what `tests/golden/generations.json` holds. The file was
written by the engine as it was before `specmlx/engine.py` was split up, so a
refactor that changes no behaviour keeps every case equal.

`collect` is the only code that iterates a generation: when the engine's
iteration API changes, adapt `collect` alone, never the golden file.

Regenerate the golden file only when a change is meant to alter outputs, and
review its diff. The floats, hence the tokens, depend on the MLX version and
backend: the file records the environment it was written in (Linux CPU, MLX
0.32; OpenBLAS and the wheel's reference BLAS give the same outputs), and a
failing case shows it when this run's differs. Either command rewrites it:

    PYTHONPATH=. python tests/test_golden_generations.py --write
    SPECMLX_WRITE_GOLDEN=1 python -m pytest tests/test_golden_generations.py

Without `--write`, the script compares every case and lists those that differ.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

if __name__ == "__main__":  # as a script: the repo's packages, and the BLAS pytest gives MLX (before MLX loads)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from specmlx.blas import ensure_fast_blas

    ensure_fast_blas()

import functools  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
from types import SimpleNamespace  # noqa: E402

import mlx.core as mx  # noqa: E402
import mlx_lm  # noqa: E402
import pytest  # noqa: E402

from specmlx.blas import describe  # noqa: E402
from specmlx.drafters import ModelDrafter, NoDrafter, PromptLookupDrafter  # noqa: E402
from specmlx.drafters.gemma4_assistant import Gemma4AssistantDrafter  # noqa: E402
from specmlx.drafters.mtp import MTPDrafter  # noqa: E402
from specmlx.engine import Engine, GenerationConfig  # noqa: E402
from specmlx.policy import DraftPolicy  # noqa: E402
from specmlx.sampling import SamplingParams  # noqa: E402
from tests import tiny  # noqa: E402
from tests.costs import FixedCosts  # noqa: E402

GOLDEN = Path(__file__).parent / "golden" / "generations.json"
WRITE_ENV = "SPECMLX_WRITE_GOLDEN"

# A small vocabulary, so that even random drafters are right now and then:
# every drafter kind sees accepted, rejected and fully accepted rounds.
VOCAB = 16
# Token ids (no tokenizer: nothing but the models decides the output). It
# repeats its start, so lookup finds matches, and is longer than the Gemma 4
# target's sliding window (8).
PROMPT = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4, 6, 2, 6, 4, 3, 3,
          3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7]
MAX_TOKENS = 40
SEED = 1234
# The automatic length's costs in plain rounds (step, width), fixed instead of
# measured from wall times: its choices then follow the tokens alone. Cheap
# enough that a drafter that is right now and then drafts, and that plain
# stretches probe every few rounds.
AUTO_COSTS = (0.05, 0.02)

DRAFTERS = ("model", "mtp", "gemma4-assistant", "lookup", "none")
TEMPERATURES = (0.0, 0.8)
POLICIES = {
    "fixed-4": DraftPolicy(num_draft=4),
    "adaptive-3": DraftPolicy(num_draft=3, adaptive=True),
    "pmin-0.3-lookup-2": DraftPolicy(num_draft=4, p_min=0.3, lookup=2),
    "auto": DraftPolicy(num_draft=None),
}
# No combination is refused by design: every drafter takes every policy at both temperatures.
CASES = [f"{d} T={t} {p}" for d in DRAFTERS for t in TEMPERATURES for p in POLICIES]

# `run.stats` fields recorded: counts only. `timed_rounds` is deterministic too,
# as fixed costs never learn a step cost (0 unless the length is automatic).
STATS = ("rounds", "drafted", "accepted", "accepted_histogram", "draft_histogram", "plain_rounds",
         "probes", "timed_rounds", "finish_reason", "generation_tokens")


def collect(engine: Engine, prompt: list[int], config: GenerationConfig) -> dict:
    """One case: its token ids in order, each token's source, and the stats'
    counts. The only place that iterates a generation: when the engine's
    iteration API changes, adapt this function and nothing else."""
    run = engine.generate(prompt, config)
    tokens, sources = [], []
    for event in run:  # a round at a time
        for token in event.tokens:
            tokens.append(token.token)
            sources.append(token.source.value)
    stats = {name: getattr(run.stats, name) for name in STATS}
    stats = {name: list(value) if isinstance(value, tuple) else value for name, value in stats.items()}
    return {"tokens": tokens, "sources": sources, "stats": stats}


@functools.cache
def models() -> SimpleNamespace:
    """The tiny models every case draws on, built by the helpers the other tests use."""
    args = tiny.qwen2_args(VOCAB)
    target = tiny.build(args, seed=0)
    g4_args = tiny.gemma4_args(VOCAB)
    return SimpleNamespace(
        target=target,
        noisy=tiny.perturbed(target, args, noise=0.3, seed=5),  # agrees with the target about half the time
        mtp=tiny.mtp(args, seed=3, draft_vocab=VOCAB // 2),  # drafts from half the ids, as trained heads do
        # A flatter target than the default: the random assistant's samples are then accepted now and then.
        g4_target=tiny.gemma4_target(g4_args, seed=0, sharpness=1.0),
        assistant=tiny.gemma4_assistant(g4_args, seed=1),
    )


def engine_for(drafter: str, policy: DraftPolicy) -> Engine:
    """A fresh engine and drafter: no case inherits another's caches or automatic length."""
    m = models()
    if drafter == "gemma4-assistant":
        engine = Engine(m.g4_target, Gemma4AssistantDrafter(m.assistant, VOCAB), eos_token_ids=[])
    else:
        engine = Engine(m.target, {
            "model": lambda: ModelDrafter(m.noisy, VOCAB, name="noisy"),
            "mtp": lambda: MTPDrafter(m.mtp, VOCAB),
            "lookup": PromptLookupDrafter,
            "none": NoDrafter,
        }[drafter](), eos_token_ids=[])
    if policy.auto:
        engine.auto_draft(policy=policy).costs = FixedCosts(*AUTO_COSTS)
    return engine


def generate_case(name: str) -> dict:
    drafter, temp, policy = name.split(" ")
    policy = POLICIES[policy]
    config = GenerationConfig(max_tokens=MAX_TOKENS, sampling=SamplingParams(temp=float(temp[2:])),
                              policy=policy, seed=SEED)
    return collect(engine_for(drafter, policy), PROMPT, config)


def environment() -> dict:
    """What the floats depend on: recorded with the golden data, shown when a case differs."""
    return {"mlx": mx.__version__, "mlx_lm": mlx_lm.__version__, "device": str(mx.default_device()),
            "platform": f"{platform.system()} {platform.machine()}", "blas": describe()}


def settings() -> dict:
    """What every case shares, recorded with the golden data."""
    return {"vocab": VOCAB, "prompt": PROMPT, "max_tokens": MAX_TOKENS, "seed": SEED, "auto_costs": list(AUTO_COSTS)}


def write_golden() -> dict:
    golden = {
        "about": "tests/test_golden_generations.py; regenerate with "
                 "`PYTHONPATH=. python tests/test_golden_generations.py --write`",
        "environment": environment(),
        "settings": settings(),
        "cases": {name: generate_case(name) for name in CASES},
    }
    GOLDEN.parent.mkdir(parents=True, exist_ok=True)
    GOLDEN.write_text(dumps(golden))
    return golden


def dumps(golden: dict) -> str:
    """Indented down to each case's fields; every field's value on one line."""
    line = functools.partial(json.dumps, separators=(", ", ": "))
    out = ["{"]
    head = [k for k in golden if k != "cases"]
    for key in head:
        out.append(f"  {line(key)}: {line(golden[key])},")
    out.append('  "cases": {')
    names = list(golden["cases"])
    for i, name in enumerate(names):
        case = golden["cases"][name]
        fields = [f"      {line(k)}: {line(v)}" for k, v in case.items()]
        out.append(f"    {line(name)}: {{\n" + ",\n".join(fields) + "\n    }" + ("," if i < len(names) - 1 else ""))
    out += ["  }", "}", ""]
    text = "\n".join(out)
    assert json.loads(text) == golden
    return text


def load_golden() -> dict:
    return json.loads(GOLDEN.read_text())


@pytest.fixture(scope="module")
def golden() -> dict:
    if os.environ.get(WRITE_ENV) == "1":
        write_golden()
    return load_golden()


def differs(expected: dict, got: dict, env: dict) -> str:
    """Where a case first differs, and the environments if they differ."""
    lines = []
    for key in ("tokens", "sources"):
        e, g = expected[key], got[key]
        if e != g:
            at = next((i for i, (a, b) in enumerate(zip(e, g)) if a != b), min(len(e), len(g)))
            lines.append(f"{key} differ from index {at}: golden {e[at:at + 8]}..., got {g[at:at + 8]}...")
    for key in sorted(set(expected["stats"]) | set(got["stats"])):
        if expected["stats"].get(key) != got["stats"].get(key):
            lines.append(f"stats.{key}: golden {expected['stats'].get(key)!r}, got {got['stats'].get(key)!r}")
    if env != environment():
        lines.append(f"(the golden file was written in {env}; this run is in {environment()})")
    return "\n".join(lines)


def test_golden_file_holds_every_case_with_these_settings(golden):
    assert list(golden["cases"]) == CASES
    assert golden["settings"] == settings(), "the cases' settings changed: regenerate the golden file"


@pytest.mark.parametrize("name", CASES)
def test_generation_equals_the_golden_one(golden, name):
    assert name in golden["cases"], f"{name} is missing from the golden file"
    expected, got = golden["cases"][name], generate_case(name)
    assert got == expected, f"{name}:\n{differs(expected, got, golden['environment'])}"


def main(argv: list[str]) -> int:
    if "--write" in argv or os.environ.get(WRITE_ENV) == "1":
        golden = write_golden()
        print(f"wrote {len(golden['cases'])} cases to {GOLDEN}")
        return 0
    golden = load_golden()
    failed = 0
    for name in CASES:
        expected, got = golden["cases"].get(name), generate_case(name)
        if got != expected:
            failed += 1
            why = "missing from the golden file" if expected is None else differs(expected, got, golden["environment"])
            print(f"{name}:\n{why}\n")
    print(f"{len(CASES) - failed}/{len(CASES)} cases equal {GOLDEN}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
