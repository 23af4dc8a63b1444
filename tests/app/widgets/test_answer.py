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
