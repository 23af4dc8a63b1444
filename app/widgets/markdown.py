"""A finished answer as Markdown, with or without the per-token highlighting.

Without it, Rich's own Markdown renders the text. With it, the answer is split
at code fences: code gets syntax colours (pygments, by character offset) under
the accepted-draft background, and prose keeps its text and token styles, so
every token stays visible where it was written.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rich.console import Group, RenderableType
from rich.markdown import Markdown
from rich.panel import Panel
from rich.style import Style
from rich.syntax import Syntax
from rich.text import Text

CODE_THEME = "monokai"
OPEN_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})[ \t]*([\w+#.-]*).*")
HEADING = re.compile(r"^#{1,6} .*$", re.MULTILINE)


@dataclass(frozen=True)
class Block:
    """A span of the answer: prose, or a fenced code block whose body is [body_start, body_end)."""

    start: int
    end: int
    code: bool = False
    lang: str = ""
    body_start: int = 0
    body_end: int = 0


def split_fences(text: str) -> list[Block]:
    """Cut text into prose and fenced code blocks (an unclosed fence runs to the end)."""
    blocks: list[Block] = []
    prose, offset, fence = 0, 0, None  # fence: (marker, lang, start, body_start)
    for line in text.splitlines(keepends=True):
        bare = line.rstrip("\r\n")
        if fence is None:
            match = OPEN_FENCE.fullmatch(bare)
            if match:
                if offset > prose:
                    blocks.append(Block(prose, offset))
                fence = (match.group(1), match.group(2), offset, offset + len(line))
        else:
            marker, lang, start, body = fence
            closing = bare.strip()
            if closing and set(closing) == {marker[0]} and len(closing) >= len(marker) and len(bare) - len(bare.lstrip()) < 4:
                blocks.append(Block(start, offset + len(line), True, lang, body, offset))
                fence, prose = None, offset + len(line)
        offset += len(line)
    if fence is not None:
        _, lang, start, body = fence
        blocks.append(Block(start, len(text), True, lang, min(body, len(text)), len(text)))
    elif prose < len(text):
        blocks.append(Block(prose, len(text)))
    return blocks


def render_markdown(styled: Text, highlight: bool, theme: str = CODE_THEME) -> RenderableType:
    """`styled` is the answer with one span per token (see AnswerView)."""
    if not highlight:
        return Markdown(styled.plain, code_theme=theme)
    parts: list[RenderableType] = []
    for block in split_fences(styled.plain):
        if block.code:
            body = styled[block.body_start : block.body_end]
            body.rstrip()
            parts.append(Panel(code_text(body, block.lang, theme), title=block.lang or None,
                               title_align="left", border_style="dim", expand=True))
        else:
            prose = styled[block.start : block.end]
            prose.rstrip()
            if prose.plain:
                prose.highlight_regex(HEADING, "bold")
                parts.append(prose)
    return Group(*parts)


def code_text(body: Text, lang: str, theme: str = CODE_THEME) -> Text:
    """Syntax colours by character offset, then each token's background on top."""
    from pygments.lexers import get_lexer_by_name
    from pygments.util import ClassNotFound

    syntax_theme = Syntax.get_theme(theme)
    out = Text(body.plain, style=syntax_theme.get_background_style())
    try:
        lexer = get_lexer_by_name(lang) if lang else None
    except ClassNotFound:
        lexer = None
    if lexer is not None:
        for index, token_type, value in lexer.get_tokens_unprocessed(body.plain):
            out.stylize(syntax_theme.get_style_for_token(token_type), index, index + len(value))
    for span in body.spans:
        style = span.style if isinstance(span.style, Style) else Style.parse(span.style)
        if style.bgcolor is not None:
            out.stylize(Style(bgcolor=style.bgcolor), span.start, span.end)
    return out
