"""An assistant answer, each token styled by who wrote it, as the engine reported it; a thinking
model's reasoning apart above it, dimmed, folded to one line unless shown (ctrl+g)."""

from __future__ import annotations

from typing import Iterable, Mapping

from rich.console import Group, RenderableType

from rich.style import Style
from rich.control import strip_control_codes
from rich.text import Text
from textual.reactive import reactive
from textual.widgets import Static

from specmlx.events import Source, TokenEvent

from ..thinking import Thinking, split_thought
from .markdown import render_markdown

# One component class per source, so the stylesheet decides which look alike.
SOURCE_CLASSES = {
    Source.DRAFT: "answer--draft",
    Source.CORRECTED: "answer--corrected",
    Source.BONUS: "answer--bonus",
    Source.TARGET: "answer--target",
}


def styled_text(events: Iterable[TokenEvent], tail: str = "", styles: Mapping[Source, Style] | None = None) -> Text:
    """The answer with one span per token that released text, styled by its source.

    A token whose text is empty (the detokenizer held back a partial character)
    gets no span; its text arrives with a later token. Control characters a
    terminal cannot show (\r, \f, ...) are dropped, as Rich would drop them.
    `tail` stays unstyled.
    """
    text = Text()
    for event in events:
        shown = strip_control_codes(event.text)
        if shown:
            text.append(shown, styles[event.source] if styles else None)
    text.append(strip_control_codes(tail))
    return text


class AnswerView(Static):
    """Grows as tokens stream in; once finished it can be shown as Markdown."""

    COMPONENT_CLASSES = set(SOURCE_CLASSES.values())
    highlight: reactive[bool] = reactive(True)
    markdown: reactive[bool] = reactive(False)
    show_thinking: reactive[bool] = reactive(False)
    _ready = False  # set on mount: component styles exist only then

    def __init__(
        self, events: Iterable[TokenEvent] = (), tail: str = "", finished: bool = False,
        highlight: bool = True, markdown: bool = False, thinking: Thinking | None = None,
        show_thinking: bool = False, **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        self.thinking = thinking
        self.set_reactive(AnswerView.show_thinking, show_thinking)
        self.set_reactive(AnswerView.highlight, highlight)
        self.set_reactive(AnswerView.markdown, markdown)
        self.events: list[TokenEvent] = list(events)
        self.tail = tail
        self.finished = finished

    @property
    def text(self) -> str:
        return "".join(e.text for e in self.events) + self.tail

    def token_styles(self) -> dict[Source, Style]:
        return {source: self.get_component_rich_style(name) for source, name in SOURCE_CLASSES.items()}

    def styled_text(self) -> Text:
        """What is shown: per-token styles, or none with highlighting off."""
        return styled_text(self.events, self.tail, self.token_styles() if self.highlight else None)

    def append(self, events: Iterable[TokenEvent]) -> None:
        self.events.extend(events)
        self._redraw()

    def finish(self, tail: str) -> None:
        self.tail = tail
        self.finished = True
        self.set_class(True, "-finished")
        self._redraw()

    def on_mount(self) -> None:
        self._ready = True
        self.set_class(self.finished, "-finished")
        self._redraw()

    def watch_highlight(self) -> None:
        self._redraw()

    def watch_markdown(self) -> None:
        self._redraw()

    def watch_show_thinking(self) -> None:
        self._redraw()

    def think(self, thinking: Thinking | None) -> None:
        """The model's markers, once its answer's prompt is known."""
        self.thinking = thinking
        self._redraw()

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._redraw()  # a theme change recolours the token styles

    def _redraw(self) -> None:
        if self._ready:  # styles are known once mounted
            self.update(self.shown())

    def shown(self) -> RenderableType:
        """What the view shows: the answer (as Markdown once finished, if asked), below its reasoning."""
        styles = self.token_styles() if self.highlight else None
        whole = styled_text(self.events, self.tail, styles)
        parts = split_thought(whole.plain, self.thinking)
        answer = whole if parts is None else whole[parts[1]]
        if self.markdown and self.finished:
            shown = render_markdown(answer, self.highlight)
        else:
            shown = answer
        return shown if parts is None else Group(self._thought(whole[parts[0]], parts[0]), shown)

    def _thought(self, thought: Text, where: slice) -> Text:
        """The reasoning, dimmed under its header, or the header alone, folded."""
        tokens, at = 0, 0
        for event in self.events:  # the tokens that wrote some of it
            end = at + len(strip_control_codes(event.text))
            tokens += at < where.stop and end > where.start
            at = end
        if not self.show_thinking:
            return Text(f"▸ Thinking ({tokens} tokens; ctrl+g shows it)", style="dim italic")
        thought.stylize("dim")
        return Text.assemble(Text("▾ Thinking\n", style="dim italic"), thought, "\n")
