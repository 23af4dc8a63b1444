"""GGUF file -> MLX model directory: the steps, in the order that fails fastest.

1. verify the checksum (given, or known for our checkpoints) and open the file;
2. read architecture, config and tokenizer, all cheap, so a bad file fails in seconds;
3. in a staging directory, dequantize and write tensors one by one, then config and tokenizer;
4. move the directory into place.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path

from tqdm import tqdm

from specmlx.convert.atomic import check_destination, staged_path
from specmlx.convert.checksum import verify_file
from specmlx.convert.gguf_config import hf_config, model_shape
from specmlx.convert.gguf_file import open_gguf
from specmlx.convert.gguf_tensors import iter_hf_tensors, plan_tensors
from specmlx.convert.gguf_tokenizer import build_tokenizer, read_vocab, tokenizer_config
from specmlx.convert.options import OutputFormat
from specmlx.convert.writer import ShardWriter
from specmlx.errors import SpecmlxError


def convert_gguf(
    path: Path, out: Path, fmt: OutputFormat, force: bool = False, sha256: str | None = None, progress: bool = True
) -> Path:
    """Convert the GGUF at `path` into an mlx-lm model directory at `out`; returns `out`."""
    path, out = Path(path), Path(out)
    check_destination(out, force)
    if not path.is_file():
        raise SpecmlxError(f"no such file: {path}")
    verify_file(path, sha256, progress)
    gf = open_gguf(path)
    with _malformed_metadata(path):
        shape = model_shape(gf)
        vocab = read_vocab(gf)
        config = {**hf_config(gf, shape, vocab), **fmt.config_entries()}
        tokenizer = build_tokenizer(vocab)
        tok_config = tokenizer_config(vocab, config.get("max_position_embeddings"))
    plan = plan_tensors(gf, shape)
    with staged_path(out, force) as work:
        work.mkdir()
        writer = ShardWriter(work, fmt)
        total = sum(item.n_elements for item in plan)
        with tqdm(total=total, unit="param", unit_scale=True, desc=f"convert {path.name}", disable=not progress) as bar:
            for name, data in iter_hf_tensors(gf, shape, plan):
                writer.add(name, data)
                bar.update(data.size)
            bar.set_postfix_str("writing last shard")
            writer.close()
        _write_json(work / "config.json", dict(sorted(config.items())))
        tokenizer.save(str(work / "tokenizer.json"))
        _write_json(work / "tokenizer_config.json", tok_config)
    return out


@contextmanager
def _malformed_metadata(path: Path):
    # A corrupt header can surface as any of these deep in parsing; report it as a bad file.
    try:
        yield
    except (ValueError, IndexError, KeyError, TypeError, UnicodeDecodeError) as exc:
        raise SpecmlxError(f"{path.name}: malformed GGUF metadata ({type(exc).__name__}: {exc})") from exc


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
