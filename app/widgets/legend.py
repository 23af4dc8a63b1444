"""What the answer's token styles mean, with the keys that change them."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widgets import Static


class Legend(Static):
    # The same component classes as AnswerView, styled by the same rules in app.tcss.
    COMPONENT_CLASSES = {"answer--draft", "answer--corrected"}
    highlight: reactive[bool] = reactive(True)
    _ready = False  # set on mount: component styles exist only then

    def on_mount(self) -> None:
        self._ready = True
        self._redraw()

    def watch_highlight(self) -> None:
        self._redraw()

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._redraw()

    def _redraw(self) -> None:
        if not self._ready:  # styles are known once mounted
            return
        text = Text()
        if self.highlight:
            text.append(" draft ", self.get_component_rich_style("answer--draft"))
            text.append(" the drafter guessed it,\n        the target accepted it\n")
            text.append(" target", self.get_component_rich_style("answer--corrected"))
            text.append(" the target wrote it\n        (correction or bonus)\n")
        else:
            text.append("token highlighting is off\n")
        text.append("ctrl+t", "bold")
        text.append(" highlighting on/off\n")
        text.append("ctrl+r", "bold")
        text.append(" Markdown view")
        self.update(text)
