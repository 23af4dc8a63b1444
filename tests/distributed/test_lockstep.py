"""Two ranks over loopback, tiny models: a sharded target, drafted on rank 0,
gives what one process gives, for every drafter kind and both kinds of sharding."""

from __future__ import annotations

import pytest

from specmlx.distributed import Control, Group, Lockstep
from specmlx.peers import ALONE

from . import ranks
from .conftest import single

PROMPT = "def add(a, b):\n    return"
TOKENS = 24


def sharded(dirs, tmp_path, drafter: str, sharding: str, *extra) -> dict:
    """`specmlx generate --distributed` on two ranks: rank 0's JSON; the other rank prints nothing."""
    argv = ["generate", "--target", str(dirs["target"]), "--drafter", str(dirs[drafter]), "--prompt", PROMPT,
            "--max-tokens", str(TOKENS), "--json", "--distributed", "--sharding", sharding, *extra]
    lead, other = ranks.run(argv, tmp_path)
    assert lead.returncode == 0, lead.stderr[-2000:]
    assert other.returncode == 0, other.stderr[-2000:]
    assert other.stdout == ""
    return lead.json()


@pytest.fixture(scope="module")
def plain(dirs, tmp_path_factory) -> dict[str, list[int]]:
    """Greedy plain decoding under each sharding: the reference every drafter must give."""
    folder = tmp_path_factory.mktemp("plain")
    return {s: sharded(dirs, folder, "none", s)["tokens"] for s in ("tensor", "pipeline")}


@pytest.mark.parametrize("sharding,drafter", [
    ("tensor", "drafter"), ("tensor", "mtp"), ("tensor", "ngram"),
    ("pipeline", "drafter"), ("pipeline", "mtp"), ("pipeline", "ngram"),
])
def test_greedy_speculative_equals_greedy_plain_under_the_same_sharding(dirs, tmp_path, plain, sharding, drafter):
    out = sharded(dirs, tmp_path, drafter, sharding, "--num-draft", "4")  # fixed: auto may never draft here
    assert out["tokens"] == plain[sharding]
    assert out["stats"]["drafter"] == drafter
    assert out["stats"]["drafted"] > 0  # it did speculate
    assert out["lockstep"]["ranks"] == 2 and out["lockstep"]["messages"] == out["stats"]["rounds"] + 1


def tie_note(target_dir, generated: list[int], other: list[int]) -> str:
    """Where two greedy outputs part, how close the one process's top two logits were there."""
    import mlx.core as mx
    from mlx_lm import load

    at = next(i for i, (a, b) in enumerate(zip(generated, other)) if a != b)
    model, tokenizer = load(str(target_dir))
    logits = model(mx.array(tokenizer.encode(PROMPT) + generated[:at])[None])[0, -1]
    top = mx.sort(logits)[-2:].tolist()
    return f"outputs part at token {at}: {generated[at]} against {other[at]}; top two logits there {top}"


@pytest.mark.parametrize("sharding", ["tensor", "pipeline"])
def test_sharded_output_equals_one_process(capsys, dirs, plain, sharding):
    """A sum split across ranks adds in another order than one matmul does. On
    these prompts no token is that close a tie; if one ever is, the failure
    says where and how close, and the equality stays as it is."""
    alone = single(capsys, "--target", dirs["target"], "--drafter", "none", "--prompt", PROMPT,
                   "--max-tokens", TOKENS)["tokens"]
    assert plain[sharding] == alone, tie_note(dirs["target"], alone, plain[sharding])


@pytest.mark.parametrize("flags", [("--num-draft", "auto"), ("--draft-p-min", "0.5"), ("--lookup", "2")],
                         ids=["auto", "p-min", "lookup"])
def test_rank_0_alone_decides_how_much_to_draft(capsys, dirs, tmp_path, plain, flags):
    """Draft lengths that rank 0 decides from its wall clock (auto) or its drafter's
    confidence (p-min), and lookups, reach the other rank with each round's announcement."""
    fixed_length = () if flags[0] == "--num-draft" else ("--num-draft", "4")  # the default is auto
    out = sharded(dirs, tmp_path, "drafter", "tensor", *flags, *fixed_length)
    assert out["tokens"] == plain["tensor"]
    # ... and the flag was obeyed, not ignored.
    stats = out["stats"]
    if flags[0] == "--num-draft":
        # Chosen from wall times, so compared with no other run: the automatic
        # length ran (a fresh one calibrates on plain rounds, then probes) and measured its costs.
        assert stats["auto"] and stats["estimate"] is not None
        assert stats["estimate"]["costs"] is not None
        assert stats["probes"] >= 1 and stats["draft_histogram"][0] >= 1
        return
    # Greedy, with the drafter's own deterministic drafts: rounds repeat exactly
    # in one process with the flag, and differ from drafting 4 every round.
    rounds = ("rounds", "drafted", "accepted", "accepted_histogram", "draft_histogram", "plain_rounds")
    args = ("--target", dirs["target"], "--drafter", dirs["drafter"], "--prompt", PROMPT, "--max-tokens", TOKENS,
            "--num-draft", "4")  # a fixed length: the automatic one (the default) reads wall times
    alone = single(capsys, *args, *flags)["stats"]
    fixed = single(capsys, *args)["stats"]
    assert {k: stats[k] for k in rounds} == {k: alone[k] for k in rounds}
    assert {k: stats[k] for k in rounds} != {k: fixed[k] for k in rounds}
    assert not stats["auto"]
    if flags[0] == "--draft-p-min":  # some drafts stopped short of the length chosen for them
        assert stats["drafted"] < sum(k * n for k, n in enumerate(stats["draft_histogram"]))


def test_a_seeded_sampled_run_repeats_exactly(capsys, dirs, tmp_path):
    args = ("--temp", "0.7", "--seed", "11", "--num-draft", "4")  # a fixed length repeats the text
    first = sharded(dirs, tmp_path, "drafter", "tensor", *args)
    again = sharded(dirs, tmp_path, "drafter", "tensor", *args)
    other = sharded(dirs, tmp_path, "drafter", "tensor", "--temp", "0.7", "--seed", "12", "--num-draft", "4")
    assert first["tokens"] == again["tokens"]
    assert first["tokens"] != other["tokens"]  # the seed matters: the check above could fail
    alone = single(capsys, "--target", dirs["target"], "--drafter", dirs["drafter"], "--prompt", PROMPT,
                   "--max-tokens", TOKENS, *args)
    assert first["tokens"] == alone["tokens"]  # rank 0 samples exactly as one process does


def test_the_other_ranks_take_rank_0s_prompt(dirs, tmp_path, plain):
    """Only rank 0 reads the prompt: another Mac need not have the file."""
    prompt = tmp_path / "prompt.txt"
    prompt.write_text(PROMPT)
    argv = ["generate", "--target", str(dirs["target"]), "--drafter", str(dirs["drafter"]), "--max-tokens",
            str(TOKENS), "--json", "--distributed"]
    lead, other = ranks.finish(ranks.start(argv + ["--prompt-file", str(prompt)], tmp_path,
                                           argvs={1: argv + ["--prompt-file", str(tmp_path / "absent.txt")]}))
    assert lead.returncode == 0 and other.returncode == 0, (lead.stderr[-1000:], other.stderr[-1000:])
    assert lead.json()["tokens"] == plain["tensor"]


def test_the_drafter_loads_on_rank_0_alone(dirs, tmp_path):
    """The other rank never drafts: it names rank 0's drafter and holds none of its weights."""
    argv = ["generate", "--target", str(dirs["target"]), "--drafter", str(dirs["drafter"]), "--prompt", PROMPT,
            "--max-tokens", "4", "--distributed"]
    lead, other = ranks.run(argv, tmp_path)
    assert lead.returncode == other.returncode == 0
    assert "drafter drafter:" in lead.stderr and "generation:" in lead.stderr
    assert other.stderr.strip() == "" and other.stdout == ""


def test_a_failed_announcement_is_not_followed_by_a_stop(monkeypatch):
    """A peer that dies while rank 0 announces a round fails the announcement. Rank 0 then
    sends nothing more: a collective sent after a failed one fails again on top of the first
    error (a second traceback), or waits on a socket whose thread has ended, forever."""
    lockstep = Lockstep(Group(None, rank=0, size=2))
    sent = []

    def lost(mine):
        sent.append(mine)
        raise RuntimeError("[ring] connection to a peer was lost")

    monkeypatch.setattr(lockstep, "_sum", lost)
    with pytest.raises(RuntimeError):
        lockstep.announce(Control(3))
    lockstep.stop()  # as the engine does when a generation ends, however it ends
    assert len(sent) == 1


def test_the_lockstep_of_a_loaded_target_is_none_in_one_process():
    lockstep = Lockstep(group=None)
    assert lockstep.lockstep() is lockstep and ALONE.lockstep() is None


def test_a_lockstep_is_not_one_process():
    """Its ranks score in step: a generation never runs a round ahead of its sync (`generation.overlaps`)."""
    assert not Lockstep(Group(None, rank=0, size=2)).one_process
