"""Training text for MTP drafters: files, folders or JSONL, shaped like chats.

A drafter is used on chat answers, so each document becomes the assistant's
reply in the target's own chat template (code inside a fence), and the token
stream is packed into fixed windows. With no data given, Python's own
standard library and installed packages are the corpus: they are on every
machine that runs specmlx.
"""

from __future__ import annotations

import json
import random
import sysconfig
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

from ..errors import SpecmlxError
from ..prompting import encode_chat, encode_text, has_chat_template

TEXT_SUFFIXES = {".py": "python", ".md": "", ".rst": "", ".txt": ""}
PIECE_CHARS = 2400  # about one screen of code: the length of a typical answer
MAX_FILE_BYTES = 1_000_000  # bigger "text" files are generated data, not writing


@dataclass(frozen=True)
class Document:
    text: str
    language: str | None  # a code fence language, or None for prose
    prompt: str


def default_sources() -> list[Path]:
    """Python's standard library and installed packages: code, and their docs as prose."""
    paths = sysconfig.get_paths()
    return list(dict.fromkeys(Path(paths[k]) for k in ("stdlib", "purelib")))


def find_files(sources: Sequence[Path]) -> list[Path]:
    """Every readable text file under `sources`, in a stable order."""
    files = []
    for source in sources:
        if not source.exists():
            raise SpecmlxError(f"{source}: no such file or directory")
        if source.is_file():
            files.append(source)
            continue
        files += sorted(p for p in source.rglob("*") if p.suffix in {*TEXT_SUFFIXES, ".jsonl"}
                        and p.is_file() and p.stat().st_size <= MAX_FILE_BYTES
                        and "site-packages" not in p.relative_to(source).parts)
    if not files:
        raise SpecmlxError(f"no .py, .md, .rst, .txt or .jsonl files in {', '.join(map(str, sources))}")
    return files


def documents(files: Sequence[Path], seed: int = 0) -> Iterator[Document]:
    """Documents from `files`, split into answer-sized pieces, in a seeded order."""
    order = list(files)
    random.Random(seed).shuffle(order)
    for path in order:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue  # binary or unreadable: skip, a corpus is not precious
        if path.suffix == ".jsonl":
            yield from _jsonl(text)
            continue
        language = TEXT_SUFFIXES.get(path.suffix, "")
        for piece in _pieces(text):
            if language:
                yield Document(piece, language, f"Write the next part of the Python module `{path.stem}`.")
            else:
                yield Document(piece, None, f"Tell me about {path.stem.replace('_', ' ')}.")


def _jsonl(text: str) -> Iterator[Document]:
    for line in text.splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict) and isinstance(row.get("text"), str):
            yield Document(row["text"], None, str(row.get("prompt") or "Continue."))
        elif isinstance(row, dict) and isinstance(row.get("response"), str):
            yield Document(row["response"], None, str(row.get("prompt") or ""))


def _pieces(text: str) -> Iterator[str]:
    piece: list[str] = []
    size = 0
    for line in text.splitlines(keepends=True):
        piece.append(line)
        size += len(line)
        if size >= PIECE_CHARS:
            yield "".join(piece)
            piece, size = [], 0
    if "".join(piece).strip():
        yield "".join(piece)


def chat_tokens(tokenizer: Any, doc: Document) -> list[int]:
    """One document as a user turn and the assistant's answer, in the chat template."""
    answer = f"```{doc.language}\n{doc.text.rstrip()}\n```" if doc.language is not None else doc.text
    messages = [{"role": "user", "content": doc.prompt}, {"role": "assistant", "content": answer}]
    if has_chat_template(tokenizer):
        return encode_chat(tokenizer, messages, add_generation_prompt=False)
    return encode_text(tokenizer, doc.prompt + "\n\n" + answer)


def token_counts(tokenizer: Any, docs: Iterator[Document], limit: int) -> Counter[int]:
    """How often each token occurs in the first `limit` tokens of `docs`. Tokenizing is
    cheap, so this sees far more text than the target can score: it picks the draft vocabulary."""
    counts: Counter[int] = Counter()
    total = 0
    for doc in docs:
        tokens = chat_tokens(tokenizer, doc)
        counts.update(tokens)
        total += len(tokens)
        if total >= limit:
            break
    return counts


def windows(tokenizer: Any, docs: Iterator[Document], length: int) -> Iterator[list[int]]:
    """The token stream of `docs` packed into windows of `length` tokens."""
    buffer: list[int] = []
    for doc in docs:
        buffer += chat_tokens(tokenizer, doc)
        while len(buffer) >= length:
            yield buffer[:length]
            buffer = buffer[length:]
