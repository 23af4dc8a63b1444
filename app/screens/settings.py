"""Sampling and speculation settings; they apply from the next answer."""

from __future__ import annotations

from typing import Sequence

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static, Switch

from specmlx.errors import SpecmlxError
from specmlx.policy import DraftPolicy

from ..settings import ChatSettings, read_policy
from ..widgets.drafter_list import ChosenButton, DrafterList


class SettingsScreen(ModalScreen[ChatSettings | None]):
    """Dismissed with the new settings, or None when cancelled."""

    BINDINGS = [
        Binding("escape", "cancel", "Cancel"),
        Binding("ctrl+s", "save", "Save"),
    ]

    def __init__(self, settings: ChatSettings, drafters: Sequence[tuple[str, str]]) -> None:
        super().__init__()
        self.settings = settings
        self.drafters = tuple(drafters)  # (name, label) of each drafter offered

    def compose(self) -> ComposeResult:
        s = self.settings
        with Vertical(id="settings-dialog"):
            yield Static("Settings · apply from the next answer", id="settings-title")
            yield Static("ctrl+s or Enter saves · Esc cancels", id="settings-hint")
            with Grid(id="settings-grid"):
                yield Label("Temperature (0 = greedy)")
                yield Input(str(s.temp), id="temp", type="number", compact=True)
                yield Label("Top-p")
                yield Input(str(s.top_p), id="top_p", type="number", compact=True)
                yield Label("Draft tokens (or auto)")
                yield Input(s.draft_label, id="num_draft", compact=True)
                yield Label("Max tokens")
                yield Input(str(s.max_tokens), id="max_tokens", type="integer", compact=True)
                yield Label("Speculation")
                yield Switch(s.speculation, id="speculation")
                yield Label("Drafter")
                with DrafterList(id="drafter", compact=True):
                    for name, label in self.drafters:  # names need not be valid widget ids
                        yield ChosenButton(label, value=s.drafter == name, name=name)
                yield Label("System prompt")
                yield Input(s.system, id="system", placeholder="(none)", compact=True)
            yield Static(id="settings-error")
            with Horizontal(id="settings-buttons"):
                yield Button("Save", variant="primary", id="save", compact=True)
                yield Button("Cancel", id="cancel", compact=True)

    def on_mount(self) -> None:
        for field in self.query(Input):
            field.cursor_blink = getattr(self.app, "cursor_blink", True)
        self.query_one("#temp", Input).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "save":
            self.action_save()
        else:
            self.action_cancel()

    def on_input_submitted(self) -> None:
        self.action_save()

    def action_cancel(self) -> None:
        self.dismiss(None)

    def action_save(self) -> None:
        try:
            settings = self.read()
        except (ValueError, SpecmlxError) as err:
            self.query_one("#settings-error", Static).update(f"⚠ {err}")
            return
        self.dismiss(settings)

    def read(self) -> ChatSettings:
        """The settings as entered; ValueError or SpecmlxError names what is wrong."""
        def value(name: str, kind: type, label: str):
            text = self.query_one(f"#{name}", Input).value.strip()
            try:
                return kind(text)
            except ValueError:
                raise ValueError(f"{label}: {text!r} is not a valid {kind.__name__}") from None

        def draft(text: str) -> DraftPolicy:
            try:
                return read_policy(text)
            except SpecmlxError as err:
                raise SpecmlxError(f"draft tokens: {err}") from None

        pressed = self.query_one("#drafter", DrafterList).pressed_button
        return ChatSettings(
            temp=value("temp", float, "temperature"),
            top_p=value("top_p", float, "top-p"),
            policy=draft(self.query_one("#num_draft", Input).value),
            max_tokens=value("max_tokens", int, "max tokens"),
            drafter=pressed.name if pressed is not None else self.settings.drafter,
            speculation=self.query_one("#speculation", Switch).value,
            system=self.query_one("#system", Input).value,
        )
