"""Can this drafter draft for this target? Checked before any token is generated.

Draft ids are fed to the target as they are, so both tokenizers must map every
string to the same id and agree on the special tokens. A drafter whose
embedding table is merely padded larger is fine: `fit_vocab` cuts the padding.
"""

from __future__ import annotations

from typing import Any

from .errors import SpecmlxError


def check_compatible(target: Any, drafter: Any, target_name: str, drafter_name: str) -> None:
    """Raise SpecmlxError naming both models if their tokenizers disagree."""
    target_vocab, drafter_vocab = target.get_vocab(), drafter.get_vocab()
    if target_vocab != drafter_vocab:
        raise SpecmlxError(
            f"drafter {drafter_name} cannot draft for target {target_name}: "
            f"their vocabularies differ ({_first_difference(target_vocab, drafter_vocab)})"
        )
    target_special, drafter_special = _specials(target), _specials(drafter)
    if target_special != drafter_special:
        differing = sorted(k for k in target_special.keys() | drafter_special.keys()
                           if target_special.get(k) != drafter_special.get(k))
        name = differing[0]
        raise SpecmlxError(
            f"drafter {drafter_name} cannot draft for target {target_name}: "
            f"special token {name} is {target_special.get(name)!r} in the target "
            f"but {drafter_special.get(name)!r} in the drafter"
        )


def check_vocab_fits(tokenizer: Any, model_vocab: int, name: str) -> None:
    """Every token id must have a row in the model's embedding table."""
    largest = max(tokenizer.get_vocab().values())
    if largest >= model_vocab:
        raise SpecmlxError(
            f"{name}: the tokenizer has ids up to {largest} but the model's "
            f"vocabulary holds only {model_vocab}"
        )


def _specials(tokenizer: Any) -> dict[str, Any]:
    return {
        "bos": tokenizer.bos_token_id,
        "eos": tokenizer.eos_token_id,
        "pad": tokenizer.pad_token_id,
        "added special tokens": sorted(
            (i, t.content) for i, t in tokenizer.added_tokens_decoder.items() if t.special
        ),
    }


def _first_difference(a: dict[str, int], b: dict[str, int]) -> str:
    sizes = f"{len(a)} tokens against {len(b)}"
    for token in sorted(a.keys() | b.keys(), key=lambda t: min(a.get(t, 1 << 62), b.get(t, 1 << 62))):
        if a.get(token) != b.get(token):
            return f"{sizes}; {token!r} is id {a.get(token)} in the target, {b.get(token)} in the drafter"
    return sizes
