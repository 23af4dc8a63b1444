"""`--kv-bits` on a sharded target: two ranks over loopback, each keeping its share of the heads' keys and
values quantized, answer as one process with the same `--kv-bits` does, which differs from the float cache's
answer (the negative control); `serve --distributed --kv-bits` answers so too."""

from __future__ import annotations

import json

import pytest

from specmlx.distributed.memory import tensor_bytes

from .. import tiny
from . import ranks
from .conftest import single

PROMPT = "def add(a, b):\n    return a + b\n\ndef add(a, b):\n    return"
TOKENS = 24
KV = ["--kv-bits", "4", "--kv-group-size", "32"]


@pytest.fixture(scope="module")
def wide(tmp_path_factory, tokenizer, vocab) -> dict[str, str]:
    """A target flat enough (sharpness 0.5) that quantized keys change its greedy answer from the first token, with heads of 32 (a
    group of 32 quantizes them; two ranks hold one key head each), the weights' index pipeline loading
    reads, and a near copy drafting."""
    root = tmp_path_factory.mktemp("wide")
    args = tiny.qwen2_args(vocab, hidden=128)
    target = tiny.build(args, seed=2, sharpness=0.5)
    path = tiny.save_model(target, args, tokenizer, root / "target")
    index = {"metadata": {}, "weight_map": {name: "model.safetensors" for name in tensor_bytes(path)}}
    (path / "model.safetensors.index.json").write_text(json.dumps(index))
    near = tiny.save_model(tiny.perturbed(target, args, 0.05, seed=3), args, tokenizer, root / "near")
    return {"target": str(path), "drafter": str(near)}


def sharded(wide, tmp_path, drafter: str, sharding: str, *extra) -> dict:
    argv = ["generate", "--target", wide["target"], "--drafter", drafter, "--prompt", PROMPT,
            "--max-tokens", str(TOKENS), "--json", "--distributed", "--sharding", sharding, *extra]
    lead, other = ranks.run(argv, tmp_path)
    assert lead.returncode == 0, lead.stderr[-2000:]
    assert other.returncode == 0, other.stderr[-2000:]
    return lead.json()


@pytest.mark.parametrize("sharding", ["tensor", "pipeline"])
def test_sharded_generate_with_kv_bits_answers_as_one_process_with_them(capsys, wide, tmp_path, sharding):
    alone = single(capsys, "--target", wide["target"], "--drafter", "none", "--prompt", PROMPT,
                   "--max-tokens", TOKENS, *KV)["tokens"]
    plain = single(capsys, "--target", wide["target"], "--drafter", "none", "--prompt", PROMPT,
                   "--max-tokens", TOKENS)["tokens"]
    assert alone != plain  # the negative control: the float cache answers otherwise
    for drafter in (wide["drafter"], "ngram"):
        assert sharded(wide, tmp_path, drafter, sharding, *KV)["tokens"] == alone, drafter


def test_a_sharded_server_with_kv_bits_answers_as_one_process_with_them(capsys, wide, tmp_path):
    from openai import OpenAI

    from .test_serve import wait_healthy

    alone = single(capsys, "--target", wide["target"], "--drafter", "none", "--prompt", PROMPT,
                   "--max-tokens", TOKENS, *KV)["text"]
    assert alone != single(capsys, "--target", wide["target"], "--drafter", "none", "--prompt", PROMPT,
                           "--max-tokens", TOKENS)["text"]  # the negative control: the float cache answers otherwise
    port = ranks.free_ports(1)[0]
    procs = ranks.start(["serve", "--target", wide["target"], "--drafter", wide["drafter"], "--port", str(port),
                         "--max-tokens", str(TOKENS), "--distributed", *KV], tmp_path)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", procs)
        with OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0, timeout=60) as client:
            for drafter in ("near", "ngram", "none"):
                answer = client.completions.create(model="target", prompt=PROMPT, max_tokens=TOKENS, temperature=0,
                                                   extra_body={"speculative": {"drafter": drafter}})
                assert answer.choices[0].text == alone, drafter
    finally:
        for p in procs:
            p.kill()
            p.wait()
    assert "keys and values: 4 bits in groups of 32" in procs[0].err.read_text()


def test_a_sharded_bench_with_kv_bits_runs_every_mode_so(wide, tmp_path):
    """Every rank's target keeps its heads quantized in every mode, the baseline included: at T=0 the
    speculative rows' tokens are the baseline's."""
    out = tmp_path / "bench.json"
    lead, other = ranks.run(["bench", "--target", wide["target"], "--drafter", f"{wide['drafter']},ngram",
                             "--limit", "2", "--max-tokens", "16", "--temps", "0", "--num-draft", "2",
                             "--calibration-steps", "1", "--warmup-tokens", "0", "--distributed", *KV,
                             "--json", str(out)], tmp_path)
    assert lead.returncode == 0, lead.stderr[-2000:]
    assert other.returncode == 0 and other.stdout == "", other.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert doc["config"]["kv_bits"] == {"bits": 4, "group_size": 32}
    rows = [r for r in doc["results"] if r["mode"] == "specmlx"]
    assert len(rows) == 2 and all(r["same_as_target"] == r["prompts"] == 2 for r in rows), rows
