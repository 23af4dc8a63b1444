"""Any model name is answered by the one served target, through Anthropic's and OpenAI's own clients:
Claude Code's model ids (set up with ANTHROPIC_BASE_URL alone), an editor's; each answer names the served
model, and the log says once for each name which model answers it."""

from __future__ import annotations

import pytest

from specmlx.paths import log_path
from specmlx.serve.aliases import MAX_NOTED, Aliases

from .conftest import MODEL, start

# The client warns of the ids Claude Code sends.
pytestmark = pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning")
anthropic = pytest.importorskip("anthropic")
openai = pytest.importorskip("openai")

SONNET, HAIKU = "claude-sonnet-4-5-20250929", "claude-haiku-4-5-20251001"  # Claude Code's main and background
ASK = [{"role": "user", "content": "hi"}]


@pytest.fixture()
def url(loaded, tmp_path, monkeypatch):
    """A fresh server (no name said yet), its log under `tmp_path`."""
    monkeypatch.setenv("SPECMLX_DATA_DIR", str(tmp_path))
    background, _ = start(loaded)
    with background as base:
        yield base


def said(name: str) -> list[str]:
    """The log's lines about requests naming `name`."""
    return [line for line in log_path().read_text().splitlines() if f"the model {name!r}" in line]


def test_claude_codes_model_ids_are_answered_by_the_served_target(url):
    with anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0, timeout=60) as claude:
        replies = [claude.messages.create(model=name, messages=ASK, max_tokens=2) for name in (SONNET, SONNET, HAIKU)]
        with claude.messages.create(model=SONNET, messages=ASK, max_tokens=2, stream=True) as events:
            started = next(e for e in events if e.type == "message_start")
        counted = claude.messages.count_tokens(model=HAIKU, messages=ASK)
    assert all(r.content[0].text and r.usage.output_tokens >= 1 for r in replies)
    # The answer names the model that wrote it, as OpenAI's answers name their snapshot.
    assert [r.model for r in replies] + [started.message.model] == [MODEL] * 4
    assert counted.input_tokens == replies[2].usage.input_tokens + replies[2].usage.cache_read_input_tokens
    for name in (SONNET, HAIKU):  # once each, however many requests name it
        assert len(said(name)) == 1 and f"answered by {MODEL!r}" in said(name)[0]


def test_openais_routes_answer_any_model_name_with_the_served_target(url):
    with openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=60) as client:
        chat = client.chat.completions.create(model="gpt-4o", messages=ASK, max_tokens=2)
        text = client.completions.create(model="gpt-4o", prompt="def", max_tokens=2)
        response = client.responses.create(model="gpt-5-codex", input="hi", max_output_tokens=2)
        card = client.models.retrieve("gpt-4o")
    assert [chat.model, text.model, response.model, card.id] == [MODEL] * 4
    assert chat.choices[0].message.content and text.choices[0].text and response.output_text
    assert len(said("gpt-4o")) == 1 and len(said("gpt-5-codex")) == 1


def test_names_are_said_up_to_a_bound(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECMLX_DATA_DIR", str(tmp_path))
    aliases = Aliases(MODEL)
    assert {aliases.answering(f"made-up-{i}") for i in range(MAX_NOTED + 5)} | {aliases.answering(MODEL)} == {MODEL}
    assert len(log_path().read_text().splitlines()) == MAX_NOTED  # a client making up names writes no more
    assert said(MODEL) == []  # the served id itself is not worth a line
