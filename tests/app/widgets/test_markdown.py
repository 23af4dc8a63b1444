"""Markdown re-rendering: fences found by offset, syntax colours under kept token backgrounds."""

from rich.console import Console, Group
from rich.markdown import Markdown
from rich.style import Style
from rich.text import Text

from app.widgets.markdown import code_text, render_markdown, split_fences

CONSOLE = Console()
ANSWER = "Prime test:\n\n```python\ndef f(n):\n    return n\n```\nDone.\n"


def test_split_fences_finds_code_and_prose_by_offset():
    blocks = split_fences(ANSWER)
    assert [b.code for b in blocks] == [False, True, False]
    code = blocks[1]
    assert code.lang == "python"
    assert ANSWER[code.body_start:code.body_end] == "def f(n):\n    return n\n"
    assert "".join(ANSWER[b.start:b.end] for b in blocks) == ANSWER


def test_an_unclosed_fence_runs_to_the_end():
    blocks = split_fences("x\n```\ncode")
    assert blocks[-1].code and blocks[-1].body_end == len("x\n```\ncode")


def test_code_keeps_each_tokens_background_over_syntax_colours():
    green = Style(color="green", bgcolor="dark_green")
    body = Text()
    body.append("def", green)
    body.append(" f(n):\n", Style(color="yellow"))  # no background: only syntax colours
    out = code_text(body, "python")
    assert out.plain == body.plain
    assert out.get_style_at_offset(CONSOLE, 0).bgcolor.name == "dark_green"
    assert out.get_style_at_offset(CONSOLE, 0).color is not None  # the keyword's syntax colour
    assert out.get_style_at_offset(CONSOLE, 5).bgcolor.name != "dark_green"


def test_highlighting_off_is_plain_markdown():
    assert isinstance(render_markdown(Text(ANSWER), highlight=False), Markdown)
    assert isinstance(render_markdown(Text(ANSWER), highlight=True), Group)
