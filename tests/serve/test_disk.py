"""The prompt cache on disk through the server: a conversation kept by one server is restored by the
next on the same folder (in process, and a real `specmlx serve` killed with SIGKILL), counted as
clients read it, for its own key alone, and never from a damaged entry or another model's; the
answers are those of a server without it."""

from __future__ import annotations

import logging
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time

import httpx
import openai
import pytest

from specmlx.diskcache.blocks import BLOCK
from specmlx.diskcache.fingerprint import Fingerprint, fingerprint
from specmlx.diskcache.keeper import Keeper
from specmlx.diskcache.store import DiskCache
from specmlx.serve.routes import owner_of

from ..damage import damage_in_place
from .conftest import MODEL, start

SYSTEM = "You are a careful coding agent. Read files before editing them; run the tests after. " * 12
FIRST = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What does add() return?"}]


def ask(url: str, messages: list[dict], key: str | None = None) -> dict:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    reply = httpx.post(url + "/v1/chat/completions", headers=headers, timeout=120,
                       json={"model": MODEL, "messages": messages, "max_tokens": 8, "temperature": 0})
    assert reply.status_code == 200, reply.text
    return reply.json()


def next_turn(first: dict) -> list[dict]:
    said = first["choices"][0]["message"]["content"]
    return FIRST + [{"role": "assistant", "content": said}, {"role": "user", "content": "And sub()?"}]


def keeper(root, target, digest: str | None = None) -> Keeper:
    fp = fingerprint(target) if digest is None else Fingerprint(str(target.resolve()), digest)
    return Keeper(DiskCache(root, 1 << 30), fp)


def cached(reply: dict) -> tuple[int, int]:
    details = reply["usage"]["prompt_tokens_details"]
    return details["cached_tokens"], details["disk_tokens"]


@pytest.fixture
def logged():
    """The disk cache's log lines (the `specmlx` logger does not propagate to pytest's capture)."""
    lines: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())
    logger = logging.getLogger("specmlx.diskcache")
    logger.addHandler(handler)
    yield lines
    logger.removeHandler(handler)


@pytest.fixture(scope="module")
def reference(loaded):
    """Each turn's answer from a server without the disk cache, and the first turn's reply."""
    background, _ = start(loaded)
    with background as url:
        first = ask(url, FIRST)
        second = ask(url, next_turn(first))
    return first, second


def test_a_restarted_server_continues_from_disk(loaded, served_dirs, tmp_path, reference):
    first, second = reference
    kept = keeper(tmp_path / "kept", served_dirs["target"])
    background, _ = start(loaded, disk=kept)
    with background as url:
        assert ask(url, FIRST)["choices"] == first["choices"]
    kept.close()  # the server stopped: what was queued is written
    assert DiskCache(tmp_path / "kept", 1 << 30).total_bytes() > 0
    again = keeper(tmp_path / "kept", served_dirs["target"])
    background, _ = start(loaded, disk=again)
    with background as url:
        reply = ask(url, next_turn(first))
    background, _ = start(loaded, disk=again)  # restarted again: its slots are empty too
    with background as url:
        streamed = streamed_usage(url)
    again.close()
    assert reply["choices"] == second["choices"]  # the answer of a server that prefilled it all
    memory_or_disk, disk = cached(reply)
    assert memory_or_disk == disk > BLOCK  # all of it from disk: this server's slots were empty
    # A prompt rendered by another route shares the system prompt's blocks, if not its template's end.
    assert streamed.cache_read_input_tokens == streamed.model_extra["disk_read_input_tokens"] > 0


def streamed_usage(url: str):
    """A Messages answer streamed through Anthropic's client: the usage its `message_start` reports, as the
    client keeps it (the client drops fields of `message_delta`'s usage it does not know, ours among them)."""
    anthropic = pytest.importorskip("anthropic")

    with anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0, timeout=120) as claude:
        with claude.messages.stream(model=MODEL, system=SYSTEM, max_tokens=8, extra_body={"temperature": 0},
                                    messages=[{"role": "user", "content": "What does add() return?"}]) as stream:
            usage = next(e for e in stream if e.type == "message_start").message.usage
            assert stream.get_final_message().usage.cache_read_input_tokens == usage.cache_read_input_tokens
    return usage


def test_an_entry_is_read_only_for_the_key_that_wrote_it(loaded, served_dirs, tmp_path):
    kept = keeper(tmp_path / "kept", served_dirs["target"])
    background, _ = start(loaded, disk=kept, api_key=("key-a", "key-b"))
    with background as url:
        first = ask(url, FIRST, "key-a")
    kept.flush()
    owners = {row[0] for row in sqlite3.connect(tmp_path / "kept" / "index.sqlite").execute("SELECT owner FROM entries")}
    assert owners == {owner_of("key-a")}  # a digest of the key, never the key
    background, _ = start(loaded, disk=kept, api_key=("key-b", "key-a"))  # restarted, keys in another order
    with background as url:
        assert cached(ask(url, next_turn(first), "key-b")) == (0, 0)
        assert cached(ask(url, next_turn(first), "key-a"))[1] > BLOCK
    kept.close()


def kept_first_turn(loaded, served_dirs, root) -> None:
    """A server with the disk cache over `root` answers the first turn, then stops (its blocks written)."""
    kept = keeper(root, served_dirs["target"])
    background, _ = start(loaded, disk=kept)
    with background as url:
        ask(url, FIRST)
    kept.close()


def test_a_damaged_entry_or_another_models_is_skipped_and_the_answer_right(loaded, served_dirs, tmp_path,
                                                                           reference, logged):
    first, second = reference
    kept_first_turn(loaded, served_dirs, tmp_path / "kept")
    other = keeper(tmp_path / "kept", served_dirs["target"], digest="weights-of-another-version")
    background, _ = start(loaded, disk=other)
    with background as url:
        reply = ask(url, next_turn(first))
    other.close()
    assert cached(reply) == (0, 0) and reply["choices"] == second["choices"]
    assert any("written for another version" in line for line in logged)

    kept = keeper(tmp_path / "kept", served_dirs["target"])
    background, _ = start(loaded, disk=kept)
    with background as url:
        ask(url, FIRST)
    kept.flush()
    first_block = next(e for e in kept.store.index.oldest() if e.start == 0 and e.length == BLOCK)
    with open(tmp_path / "kept" / first_block.file, "r+b") as damaged:
        damaged.seek(200)
        damaged.write(b"\xff" * 64)
    background, _ = start(loaded, disk=kept)
    with background as url:
        reply = ask(url, next_turn(first))
    kept.close()
    assert reply["choices"] == second["choices"]
    assert cached(reply) == (0, 0)  # the damaged first block, and so all that follows it, was prefilled
    assert any("damaged in place" in line for line in logged)  # its checksum tells, before its load would


def test_a_block_damaged_in_place_is_never_restored(loaded, served_dirs, tmp_path, reference, logged):
    """Every block's target tensors damaged in place at their size (1e30s in the middle of each), after
    the server stopped: a restarted server answers, through the official client, as one without the
    cache, from a prefill, and says why once a block."""
    first, second = reference
    kept_first_turn(loaded, served_dirs, tmp_path / "kept")
    files = sorted((tmp_path / "kept").glob("*.safetensors"))
    assert files and all(damage_in_place(f, lambda name: name.startswith("target.")) for f in files)
    again = keeper(tmp_path / "kept", served_dirs["target"])
    background, _ = start(loaded, disk=again)
    with background as url:
        reply = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0).chat.completions.create(
            model=MODEL, messages=next_turn(first), max_tokens=8, temperature=0)
    again.close()
    assert reply.choices[0].message.content == second["choices"][0]["message"]["content"]
    assert reply.usage.prompt_tokens_details.cached_tokens == 0
    assert any("damaged in place" in line for line in logged)


def test_a_server_killed_between_writes_restarts_from_what_was_written(served_dirs, tmp_path, reference):
    first, second = reference
    env = os.environ | {"PYTHONUNBUFFERED": "1", "SPECMLX_CACHE_DIR": str(tmp_path / "kept")}

    def serve() -> tuple[subprocess.Popen, str]:
        proc = subprocess.Popen([sys.executable, "-m", "specmlx", "serve", "--target", str(served_dirs["target"]),
                                 "--drafter", "ngram", "--port", "0"], stderr=subprocess.PIPE,
                                stdout=subprocess.DEVNULL, text=True, env=env)
        lines: list[str] = []
        while not any(line.startswith("try: curl") for line in lines):
            line = proc.stderr.readline()
            assert line, "".join(lines)
            lines.append(line)
        assert any(line.startswith(f"prompt cache on disk: {tmp_path / 'kept'}") for line in lines)
        return proc, re.search(r"listening on (http://127\.0\.0\.1:\d+)/v1", "".join(lines)).group(1)

    proc, url = serve()
    try:
        ask(url, FIRST)
        deadline = time.monotonic() + 600  # a guard against a hang, not a measure: the writer's pace is no claim
        while not _indexed(tmp_path / "kept") and time.monotonic() < deadline:
            time.sleep(0.2)
        ask(url, [FIRST[0], {"role": "user", "content": "Now something else entirely."}])
        proc.send_signal(signal.SIGKILL)  # while the second answer's blocks may be being written
        proc.wait(timeout=30)
    finally:
        proc.kill()
        proc.stderr.close()
    assert _indexed(tmp_path / "kept") > 0
    proc, url = serve()
    try:
        reply = ask(url, next_turn(first))
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()
        proc.stderr.close()
    assert reply["choices"] == second["choices"]
    assert cached(reply)[1] > BLOCK
    modes = {p.name: oct(p.stat().st_mode & 0o777) for p in (tmp_path / "kept").iterdir()}
    assert set(modes.values()) == {oct(0o600)}, modes
    assert (tmp_path / "kept").stat().st_mode & 0o777 == 0o700


def _indexed(root) -> int:
    if not (root / "index.sqlite").exists():
        return 0
    with sqlite3.connect(root / "index.sqlite") as db:
        return db.execute("SELECT COUNT(*) FROM entries").fetchone()[0]
