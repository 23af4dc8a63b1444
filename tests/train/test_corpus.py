"""Corpus reading for drafter training."""

import json

import pytest

from specmlx.errors import SpecmlxError
from specmlx.train.corpus import Document, chat_tokens, documents, find_files, windows


def test_files_folders_and_jsonl_become_documents(tmp_path):
    (tmp_path / "a.py").write_text("def f():\n    return 1\n")
    (tmp_path / "notes.md").write_text("# Title\n\nSome prose.\n")
    (tmp_path / "rows.jsonl").write_text(json.dumps({"prompt": "Hi", "response": "Hello!"}) + "\nnot json\n")
    (tmp_path / "image.png").write_bytes(b"\x89PNG")
    docs = list(documents(find_files([tmp_path])))
    assert sorted(d.text for d in docs) == ["# Title\n\nSome prose.\n", "Hello!", "def f():\n    return 1\n"]
    assert {d.language for d in docs} == {"python", None}


def test_no_usable_files_is_a_clear_error(tmp_path):
    (tmp_path / "x.bin").write_bytes(b"\0")
    with pytest.raises(SpecmlxError, match="no .py, .md"):
        find_files([tmp_path])
    with pytest.raises(SpecmlxError, match="no such file"):
        find_files([tmp_path / "missing"])


def test_documents_are_chat_answers_packed_into_windows(tokenizer):
    doc = Document("x = 1\n", "python", "Write code.")
    tokens = chat_tokens(tokenizer, doc)
    assert tokenizer.decode(tokens) == ("<|im_start|>user\nWrite code.<|im_end|>\n"
                                        "<|im_start|>assistant\n```python\nx = 1\n```<|im_end|>\n")
    packed = list(windows(tokenizer, iter([doc] * 10), 16))
    assert all(len(w) == 16 for w in packed)
    assert sum(packed, []) == (tokens * 10)[: 16 * len(packed)]
