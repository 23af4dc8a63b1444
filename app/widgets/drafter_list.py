"""The settings' drafter list: one radio button per drafter the chat offers."""

from __future__ import annotations

from textual.widgets import RadioButton, RadioSet


class ChosenButton(RadioButton):
    """A radio button whose mark shows only when it is on, so the choice reads without colour."""

    @property
    def BUTTON_INNER(self) -> str:  # noqa: N802 (Textual's class attribute, per button here)
        return "●" if self.value else " "


class DrafterList(RadioSet):
    """Its keyboard cursor starts on the chosen entry, not on the first
    (as Textual's RadioSet does), so Space keeps the choice."""

    def on_mount(self) -> None:
        self.call_next(self._cursor_to_choice)  # after RadioSet's own mount handler, which runs later

    def _cursor_to_choice(self) -> None:
        if self.pressed_index >= 0:
            self._selected = self.pressed_index  # RadioSet's cursor; it has no public setter
