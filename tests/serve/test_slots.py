"""Which slot a request takes, and what slots give back when their caches grow too large."""

from __future__ import annotations

import mlx.core as mx
import pytest

from specmlx.caches.stream import kv_bytes_per_token
from specmlx.drafters import NGRAM, NONE, SUFFIX, SuffixDrafter, tell_owner
from specmlx.drafters.gemma4_assistant import Gemma4AssistantDrafter
from specmlx.engine import GenerationConfig
from specmlx.peers import Alone
from specmlx.policy import DraftPolicy
from specmlx.sampling import SamplingParams
from specmlx.serve.mirror import NoMirror
from specmlx.serve.slots import LIVE_FOR, MAX_SLOTS, MIN_SLOTS, TOKENS_PER_SLOT, Slots, default_count, slots_for

from .. import tiny
from .conftest import MODEL, greedy, start


class Emptied(NoMirror):
    """A mirror that notes the slots it is told were emptied."""

    def __init__(self) -> None:
        self.peers = Alone()  # its own: the slots' engines must keep step with this one
        self.slots: list[int] = []

    def emptied(self, slot: int) -> None:
        self.slots.append(slot)


class Copied(NoMirror):
    """A mirror that notes the copies it is told of: (source slot, slot, length)."""

    def __init__(self) -> None:
        self.peers = Alone()
        self.copies: list[tuple[int, int, int]] = []

    def copied(self, source: int, slot: int, length: int) -> None:
        self.copies.append((source, slot, length))


def take(mlx, slots: Slots, *args):
    """A request's slot, released at once: these requests run one after another."""
    slot = mlx.call(slots.take, *args)
    slots.release(slot)
    return slot


def run(mlx, slot, prompt: list[int], tokens: int = 6) -> None:
    mlx.call(lambda: list(slot.engine.generate(prompt, GenerationConfig(max_tokens=tokens))))


def test_a_conversation_returns_to_its_slot_and_another_takes_an_empty_one(loaded):
    mlx, target, drafters = loaded
    slots = mlx.call(Slots, target.model, target.tokenizer, drafters, 2)
    a, b = list(range(40, 60)), [40, 41] + list(range(100, 130))  # b shares only a short start with a
    first = take(mlx, slots, a, "drafter")
    run(mlx, first, a)
    assert take(mlx, slots, b, "drafter") is not first
    run(mlx, slots._slots[1], b)
    continued = a + first.engine.context[len(a):] + [7, 8]
    again = take(mlx, slots, continued, "ngram")
    assert again is first
    assert again.engine.reusable(continued) >= len(a)
    assert again.engine.drafter is first.drafters["ngram"]
    # A drafter that reads hidden states needs them for the whole context: the slot is kept,
    # its target cache cut back for the prefill (Engine.use).
    assert take(mlx, slots, continued, "mtp") is first and first.engine.drafter is first.drafters["mtp"]


def answer(mlx, slot, prompt: list[int], tokens: int = 8) -> list[int]:
    return mlx.call(lambda: [t.token for e in slot.engine.generate(prompt, GenerationConfig(max_tokens=tokens))
                             for t in e.tokens])


@pytest.mark.parametrize("drafter", ["drafter", "mtp", "ngram"])
def test_a_new_conversation_sharing_a_live_ones_start_copies_it_and_leaves_it_whole(loaded, drafter):
    """A subagent with the main session's long system prompt and a new question: it takes another
    slot holding a copy of the shared start (every rank copies it too), the main session's next turn
    reuses its whole cache, and both answer as the target alone does."""
    mlx, target, drafters = loaded
    mirror = Copied()
    slots = mlx.call(Slots, target.model, target.tokenizer, drafters, 4, mirror=mirror)
    system = list(range(40, 240))
    main = take(mlx, slots, system + [5, 6], drafter)
    answer(mlx, main, system + [5, 6])
    turn = main.engine.context + [7, 8]
    assert take(mlx, slots, turn, drafter) is main  # its second turn: a live conversation
    assert answer(mlx, main, turn) == greedy(target.model, turn, 8)
    held, cached = list(main.engine.context), main.engine.cache_length()  # all but the last token, never fed
    assert cached == len(held) - 1
    question = system + [11, 12, 13]
    sub = mlx.call(slots.take, question, drafter)
    assert sub is not main and main.engine.context == held
    assert sub.engine.reusable(question) == len(system)
    assert mirror.copies == [(slots.index(main), slots.index(sub), len(system))]
    assert answer(mlx, sub, question) == greedy(target.model, question, 8)
    slots.release(sub)
    turn = held + [14, 15]
    assert take(mlx, slots, turn, drafter) is main and main.engine.reusable(turn) == cached
    assert answer(mlx, main, turn) == greedy(target.model, turn, 8)


def test_a_next_turn_that_renders_the_last_prompts_end_anew_continues_its_slot(loaded):
    """Some templates end a prompt with what the answer's turn drops when rendered again (Qwen3's empty
    think block with thinking off): the next turn is still this conversation's, its cache reused."""
    mlx, target, drafters = loaded
    slots = mlx.call(Slots, target.model, target.tokenizer, drafters, 4)
    system, think = list(range(40, 140)), [90, 91, 92, 93]
    main = take(mlx, slots, system + [5, 6] + think, "drafter")
    said = answer(mlx, main, system + [5, 6] + think)
    turn = system + [5, 6] + said + [7, 8]
    assert take(mlx, slots, turn, "drafter") is main and main.turns == 2
    assert answer(mlx, main, turn) == greedy(target.model, turn, 8)


def test_a_busy_slot_is_not_taken_even_by_its_own_conversation(loaded):
    """Requests run at once in a batch: a slot holds one of them until released."""
    mlx, target, drafters = loaded
    slots = mlx.call(Slots, target.model, target.tokenizer, drafters, 2)
    chat = list(range(40, 60))
    first = take(mlx, slots, chat, "ngram")
    run(mlx, first, chat)
    busy = mlx.call(slots.take, first.engine.context + [5], "ngram")
    assert busy is first and slots.free()
    other = mlx.call(slots.take, first.engine.context + [6], "ngram")  # the same conversation, while busy
    assert other is not first and not slots.free()
    slots.release(busy)
    assert slots.free() and mlx.call(slots.take, first.engine.context + [7], "ngram") is first


def test_a_third_conversation_takes_the_least_recently_used_slot(loaded):
    mlx, target, drafters = loaded
    slots = mlx.call(Slots, target.model, target.tokenizer, drafters, 2)
    prompts = [list(range(s, s + 20)) for s in (30, 60, 90)]
    held = []
    for prompt in prompts[:2]:
        held.append(take(mlx, slots, prompt, "ngram"))
        run(mlx, held[-1], prompt)
    take(mlx, slots, prompts[0] + held[0].engine.context[20:], "ngram")  # the first is used again
    assert take(mlx, slots, prompts[2], "ngram") is held[1]


def test_slots_over_the_memory_cap_are_emptied_oldest_first(loaded):
    mlx, target, drafters = loaded
    mirror = Emptied()
    slots = mlx.call(Slots, target.model, target.tokenizer, drafters, 2, 1, mirror)  # one byte: nothing idle is kept
    one = take(mlx, slots, list(range(50, 80)), "drafter")
    run(mlx, one, list(range(50, 80)))
    two = take(mlx, slots, list(range(150, 180)), "drafter")
    run(mlx, two, list(range(150, 180)))
    assert all(n > 0 for n in slots.contexts())
    mlx.call(slots.trim, two)  # the one in use is kept
    assert slots.contexts()[slots._slots.index(two)] > 0
    assert sorted(slots.contexts())[0] == 0
    assert one not in slots._slots
    assert mirror.slots == [1 - slots.index(two)]  # the other ranks empty the same slot
    assert all(s.engine.peers is mirror.peers for s in slots._slots)  # every engine, the new one too


def test_one_off_requests_take_turns_beside_a_live_conversation(loaded):
    """A web UI's title, tags and follow-up requests after a turn continue nothing: they must not
    push the chat out of its slot, as plain least-recently-used would with two slots."""
    mlx, target, drafters = loaded
    slots = mlx.call(Slots, target.model, target.tokenizer, drafters, 2)
    chat = list(range(40, 70))
    first = take(mlx, slots, chat, "ngram")
    run(mlx, first, chat)
    chat = first.engine.context + [5, 6]
    assert take(mlx, slots, chat, "ngram") is first  # the second turn: a conversation now
    run(mlx, first, chat)
    for start in (100, 200, 300):  # title, tags, follow-ups
        one_off = take(mlx, slots, list(range(start, start + 40)), "ngram")
        assert one_off is not first
        run(mlx, one_off, list(range(start, start + 40)))
    chat = first.engine.context + [7, 8]
    assert take(mlx, slots, chat, "ngram") is first
    assert first.engine.reusable(chat) == len(chat) - 3


def test_short_one_off_requests_do_not_push_out_a_longer_first_turn(loaded):
    """A chat's first turn is not yet known to be a conversation; still, requests that continue
    nothing and are shorter than it (a title, tags) take turns in the other slot."""
    mlx, target, drafters = loaded
    slots = mlx.call(Slots, target.model, target.tokenizer, drafters, 2)
    chat = list(range(40, 140))  # a pasted file and a question
    first = take(mlx, slots, chat, "ngram")
    run(mlx, first, chat)
    for start in (300, 400, 500):
        one_off = take(mlx, slots, list(range(start, start + 40)), "ngram")
        assert one_off is not first
        run(mlx, one_off, list(range(start, start + 40)))
    chat = first.engine.context + [7, 8]
    assert take(mlx, slots, chat, "ngram") is first


def test_a_long_new_request_may_take_a_first_turns_slot(loaded):
    """Only a short request leaves a first turn alone: a new chat as long takes the least recently used."""
    mlx, target, drafters = loaded
    slots = mlx.call(Slots, target.model, target.tokenizer, drafters, 2)
    taken = []
    for start in (0, 200, 400):
        taken.append(take(mlx, slots, list(range(start, start + 100)), "ngram"))
        run(mlx, taken[-1], list(range(start, start + 100)))
    assert taken[2] is taken[0]


def test_a_conversation_gone_quiet_makes_room(loaded):
    mlx, target, drafters = loaded
    slots = mlx.call(Slots, target.model, target.tokenizer, drafters, 2)
    chat = list(range(40, 70))
    first = take(mlx, slots, chat, "ngram")
    run(mlx, first, chat)
    take(mlx, slots, first.engine.context + [5], "ngram")
    taken = []
    for start in range(100, 100 + 50 * (LIVE_FOR * 2 + 1), 50):  # requests about as long as the chat
        taken.append(take(mlx, slots, list(range(start, start + 30)), "ngram"))
        run(mlx, taken[-1], list(range(start, start + 30)))
    assert first not in taken[:LIVE_FOR * 2 - 1] and first is taken[-1]


def test_a_request_reuses_only_its_own_owners_caches(loaded):
    """What a cache holds shows in cached_tokens and prefill time: another owner's is never reused,
    not even a shared start, and a slot that changes hands is emptied (the mirror's too)."""
    mlx, target, drafters = loaded
    mirror = Emptied()
    slots = mlx.call(Slots, target.model, target.tokenizer, drafters, 2, mirror=mirror)
    secret = list(range(40, 80))
    mine = take(mlx, slots, secret, "ngram", 0)
    assert mirror.slots == []  # an empty slot is simply taken: nothing to drop on other ranks
    run(mlx, mine, secret)
    probe = secret[:30] + [1, 2]
    theirs = take(mlx, slots, probe, "ngram", 1)
    assert theirs is not mine and theirs.engine.reusable(probe) == 0
    run(mlx, theirs, probe)
    mirror.slots.clear()
    again = take(mlx, slots, probe + [3], "ngram", 2)  # a third owner: the least recently used slot...
    assert again.owner == 2 and again.engine.reusable(probe + [3]) == 0  # ...emptied
    assert mirror.slots == [slots.index(again)]
    assert take(mlx, slots, secret + [9], "ngram", 2).engine.reusable(secret + [9]) == 0


def test_the_default_count_keeps_a_few_thousand_tokens_a_slot_in_the_memory_cap(loaded):
    mlx, target, drafters = loaded
    args = target.model.args
    per_token = 2 * args.num_hidden_layers * args.num_key_value_heads * (args.hidden_size // args.num_attention_heads) * 4
    assert mlx.call(kv_bytes_per_token, target.model) == per_token  # float32 keys and values
    assert mlx.call(default_count, [target.model], per_token * TOKENS_PER_SLOT * 5) == 5
    assert mlx.call(default_count, [target.model, target.model], per_token * TOKENS_PER_SLOT * 5) == MIN_SLOTS
    assert mlx.call(default_count, [target.model], 1 << 40) == MAX_SLOTS


def test_the_default_count_counts_the_hidden_states_an_mtp_head_keeps(loaded):
    """An MTP head keeps the target's final hidden state at every position (and its own KV
    cache): about 6 KB a token in float32 for a 1.5B target, more than the target's KV cache."""
    mlx, target, drafters = loaded
    head = drafters["mtp"]
    args, config = target.model.args, head.model.config
    kv = mlx.call(kv_bytes_per_token, target.model)
    row = args.hidden_size * 4  # one float32 hidden state a position
    own = 2 * config.num_layers * config.num_key_value_heads * (config.hidden_size // config.num_attention_heads) * 4
    assert mlx.call(head.bytes_per_token, target.model) == row + own
    budget = (kv + row + own) * TOKENS_PER_SLOT * 5
    assert mlx.call(default_count, [target.model], budget, [head]) == 5
    assert mlx.call(default_count, [target.model], budget) > 5  # what leaving them out would give
    # What `serve` counts for its drafters: the noisy copy's KV cache (as large as the
    # target's), the head's rows and cache; ngram and none keep nothing.
    per_slot = (2 * kv + row + own) * TOKENS_PER_SLOT
    assert mlx.call(slots_for, target.model, drafters.values(), per_slot * 3) == 3
    assert mlx.call(slots_for, target.model, [drafters["drafter"]], per_slot * 3) > 3


def test_a_gemma4_assistant_keeps_hidden_states_only():
    """It reads the target's KV cache in place: what it adds a token is the target's hidden state."""
    args = tiny.gemma4_args(vocab_size=64)
    target = tiny.gemma4_target(args, seed=1)
    assistant = Gemma4AssistantDrafter(tiny.gemma4_assistant(args, seed=2), 64)
    assert assistant.bytes_per_token(target) == args.hidden_size * 4


def test_the_memory_cap_counts_an_mtp_heads_hidden_states(loaded):
    mlx, target, drafters = loaded
    slots = mlx.call(Slots, target.model, target.tokenizer, drafters, 2)
    prompt = list(range(50, 80))
    slot = take(mlx, slots, prompt, "mtp")
    run(mlx, slot, prompt)
    head = slot.drafters["mtp"]
    assert head.history.length > len(prompt)  # a row for every position the target scored and kept
    caches = [slot.engine.cache, head.cache, slot.drafters["drafter"].cache]
    kv = sum(layer.nbytes for cache in caches for layer in cache if layer.keys is not None)
    assert slot.held_bytes() == kv + head.history.length * target.model.args.hidden_size * 4


def test_every_slot_starts_from_the_automatic_lengths_measurements(loaded):
    """What the automatic draft length measures is the machine's and the drafter's: a second
    conversation, in another slot or in a slot made anew, drafts from it and does not calibrate
    again (a fresh one runs two rounds plainly, then probes its drafter before drafting)."""
    mlx, target, drafters = loaded
    slots = mlx.call(Slots, target.model, target.tokenizer, drafters, 2)
    auto = GenerationConfig(max_tokens=16, policy=DraftPolicy(num_draft=None))

    def lengths(slot, prompt: list[int]) -> list[int]:
        return mlx.call(lambda: [e.num_draft for e in slot.engine.generate(prompt, auto)])

    first = take(mlx, slots, list(range(40, 60)), "drafter", 0)
    assert lengths(first, list(range(40, 60)))[:3] == [0, 0, 0]  # the first conversation calibrates
    measured = first.engine.auto_draft()
    assert measured.calibration == 0 and measured.estimate().costs is not None
    second = take(mlx, slots, list(range(100, 130)), "drafter", 1)
    assert second is not first and second.engine.auto_draft() is measured
    lengths(second, list(range(100, 130)))
    anew = take(mlx, slots, list(range(200, 230)), "drafter", 2)  # another owner's: a slot made anew
    assert anew.engine is not first.engine and anew.engine is not second.engine
    assert anew.engine.auto_draft() is measured and measured.calibration == 0


def test_a_subagent_leaves_the_main_sessions_cache_whole(loaded):
    """Claude Code's subagent through the server's batch: the same long system prompt, a new question.
    The main session's next turn reuses all it had (cached_tokens), the subagent the shared start,
    and each answer is what a fresh server gives."""
    from openai import OpenAI

    system = {"role": "system", "content": " ".join(f"rule {i}: keep the code simple." for i in range(40))}
    main = [system, {"role": "user", "content": "def add(a, b):"}]
    sub = [system, {"role": "user", "content": "for i in range(10):"}]

    def chat(url: str, messages: list[dict]):
        with OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=60) as client:
            reply = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=8, temperature=0)
        return reply.choices[0].message.content, reply.usage

    background, _ = start(loaded, slots=4)
    with background as url:
        said, _ = chat(url, main)
        main += [{"role": "assistant", "content": said}, {"role": "user", "content": "import numpy as np"}]
        said, before = chat(url, main)  # the second turn: a live conversation
        main += [{"role": "assistant", "content": said}, {"role": "user", "content": "x = np.zeros((3, 4))"}]
        asked, shared = chat(url, sub)
        answered, after = chat(url, main)
    assert shared.prompt_tokens_details.cached_tokens > 200  # the system prompt, copied
    assert after.prompt_tokens_details.cached_tokens >= before.prompt_tokens  # all the last turn held
    for messages, got in ((sub, asked), (main, answered)):
        background, _ = start(loaded, slots=4)
        with background as url:
            assert chat(url, messages)[0] == got


def served(mlx, slots: Slots, prompt: list[int], drafter: str, owner, tokens: int = 16):
    """One request run as a server runs it: its slot taken, its answer generated, the slot released."""
    def serve():
        slot = slots.take(prompt, drafter, owner)
        run = slot.engine.generate(prompt, GenerationConfig(max_tokens=tokens, policy=DraftPolicy(num_draft=8)))
        said = [t.token for e in run for t in e.tokens]
        run.close()
        slots.release(slot)
        return said, run.stats

    return mlx.call(serve)


@pytest.mark.parametrize("drafter", [NONE, NGRAM, "drafter"])
def test_suffix_learns_every_request_of_its_owner_whatever_drafted_it(loaded, drafter):
    """A key's turn drafted by another drafter is in its suffix memory (issue 53): its next suffix
    request on the same text copies that answer, while another key learns nothing of it."""
    mlx, target, drafters = loaded
    memory = SuffixDrafter()
    slots = mlx.call(Slots, target.model, target.tokenizer, {**drafters, SUFFIX: memory}, 2)
    prompt = list(range(40, 70))
    said, _ = served(mlx, slots, prompt, drafter, "a")

    def proposes(owner) -> list[int]:
        instance = memory.fresh()
        tell_owner(instance, owner)
        return instance.draft(prompt, 8, SamplingParams(), mx.random.key(0)).tokens.tolist()

    assert proposes("a") == said[:8] and proposes("b") == []
    again, copied = served(mlx, slots, prompt, SUFFIX, "a")
    assert again == said and copied.accepted == len(said) - copied.rounds  # all but each round's own token
    alone, fresh = served(mlx, slots, prompt, SUFFIX, "b")
    assert alone == said and fresh.accepted < copied.accepted
