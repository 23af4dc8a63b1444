"""Per-token styling: one span per token, in the style of the source the engine reported."""

from __future__ import annotations

from textual.app import App, ComposeResult

from app.widgets.answer import SOURCE_CLASSES, AnswerView, styled_text
from specmlx.events import Source, TokenEvent

from ..helpers import run

EVENTS = [
    TokenEvent(1, "def", Source.DRAFT), TokenEvent(2, " add", Source.DRAFT), TokenEvent(3, "(", Source.CORRECTED),
    TokenEvent(4, "", Source.DRAFT), TokenEvent(5, "a, b", Source.BONUS), TokenEvent(6, "):", Source.TARGET),
]


class Host(App):
    CSS_PATH = "../../../app/app.tcss"

    def __init__(self, view: AnswerView) -> None:
        super().__init__()
        self.view = view

    def compose(self) -> ComposeResult:
        yield self.view


def test_every_token_with_text_gets_one_span_of_its_sources_style():
    styles = {s: f"style-{s.value}" for s in Source}
    text = styled_text(EVENTS, tail="\n", styles=styles)
    assert text.plain == "def add(a, b):\n"
    spans = [(text.plain[s.start:s.end], s.style) for s in text.spans]
    assert spans == [(e.text, styles[e.source]) for e in EVENTS if e.text]  # the tail stays unstyled


def test_without_styles_there_are_no_spans():
    assert styled_text(EVENTS, styles=None).spans == []


def test_the_view_uses_the_stylesheet_and_toggles():
    async def scenario():
        view = AnswerView(EVENTS, finished=True)
        app = Host(view)
        async with app.run_test() as pilot:
            draft = view.get_component_rich_style(SOURCE_CLASSES[Source.DRAFT])
            target = view.get_component_rich_style(SOURCE_CLASSES[Source.CORRECTED])
            assert draft != target and draft.bgcolor is not None  # accepted drafts stand out
            for source in (Source.BONUS, Source.TARGET):  # the target's own tokens look alike
                assert view.get_component_rich_style(SOURCE_CLASSES[source]) == target
            text = view.styled_text()
            assert [s.style for s in text.spans] == [draft, draft, target, target, target]
            view.highlight = False
            await pilot.pause()
            assert view.styled_text().spans == []
    run(scenario)


THOUGHT = [  # Qwen3.5's answer: its template opened the think block in the prompt
    TokenEvent(1, "Let", Source.DRAFT), TokenEvent(2, " me plan", Source.TARGET), TokenEvent(3, "\n</think>", Source.DRAFT),
    TokenEvent(4, "\n\n", Source.DRAFT), TokenEvent(5, "Hi", Source.DRAFT), TokenEvent(6, " there", Source.CORRECTED),
]


def test_a_thinking_models_reasoning_is_folded_to_a_line_or_shown_dimmed_with_its_drafts_highlighted():
    from rich.console import Group

    from app.thinking import Thinking

    async def scenario():
        view = AnswerView(THOUGHT, finished=True, thinking=Thinking("<think>", "</think>", inside=True))
        async with Host(view).run_test() as pilot:
            draft = view.get_component_rich_style(SOURCE_CLASSES[Source.DRAFT])
            folded = view.shown()
            assert isinstance(folded, Group)
            header, answer = folded.renderables
            assert header.plain == "▸ Thinking (2 tokens; ctrl+g shows it)"
            assert answer.plain == "Hi there" and answer.spans[0].style == draft  # the answer alone, highlighted
            view.show_thinking = True
            await pilot.pause()
            thought, answer = view.shown().renderables
            assert thought.plain == "▾ Thinking\nLet me plan\n" and answer.plain == "Hi there"
            let = [s for s in thought.spans if thought.plain[s.start:s.end] == "Let"]
            assert let and all(s.style == draft for s in let)  # still highlighted, and dimmed over all
            assert any(s.style == "dim" and s.start <= thought.plain.index("Let") < s.end for s in thought.spans)
            view.think(None)  # a model that does not think: its text is the answer's, markers and all
            assert view.shown().plain.startswith("Let me plan\n</think>")
    run(scenario)
