"""Fill in the middle: a completion's prompt and `suffix` in the model's own FIM layout.

A model trained for FIM reads `[BOS] PRE prefix SUF suffix MID` and writes the
middle, then an end token. The layout is found from the tokenizer's vocabulary
(each FIM token a single token of it), as llama.cpp finds its FIM tokens by
their text (`src/llama-vocab.cpp`, `llama_vocab::impl::load`), and built as
llama.cpp's server builds an infill prompt (`tools/server/utils.hpp`,
`format_infill`): the prefix and suffix encoded as plain text, without parsing
special tokens (`tokenize_mixed(vocab, input_prefix, false, false)`), the FIM
tokens placed by id, and the BOS first if the tokenizer adds one to a text. So
code that contains `<|fim_middle|>` as text is never read as that token.

Not recognised: CodeLlama (`▁<PRE>`, `▁<SUF>`, `▁<MID>`). Meta's reference
(codellama `llama/generation.py`, `infilling_prompt_tokens`) writes `<PRE>
{pre} <SUF>{suf} <MID>`, the suffix encoded "without an implicit leading
space" by a SentencePiece trick (`llama/tokenizer.py`, `encode_infilling`:
`sp_model.encode("☺" + s)[2:]`), which transformers' CodeLlamaTokenizer
rebuilds its own way and llama.cpp does not; with no CodeLlama tokenizer here
to check an equivalent against, its models get the 400 of a model without FIM.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from ..prompting import plain_encoder


@dataclass(frozen=True)
class FimTokens:
    """A family's FIM tokens by their text, and the tokens that end its middle when the vocabulary has them."""

    name: str
    prefix: str
    suffix: str
    middle: str
    ends: tuple[str, ...]


# A middle ends at the model's end of text, or at a token that starts another file or another FIM
# prompt: llama.cpp stops every generation at FIM_PAD, FIM_REP and FIM_SEP besides its end tokens
# (`llama-vocab.cpp`: "maintain a list of tokens that cause end-of-generation").
FAMILIES = (
    # Qwen2.5-Coder; CodeGemma has the same three tokens and separates files with <|file_separator|>.
    FimTokens("qwen", "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>",
              ("<|endoftext|>", "<|fim_pad|>", "<|file_sep|>", "<|repo_name|>", "<|file_separator|>")),
    FimTokens("starcoder", "<fim_prefix>", "<fim_suffix>", "<fim_middle>",
              ("<|endoftext|>", "<fim_pad>", "<file_sep>", "<reponame>", "<repo_name>", "<filename>")),
    FimTokens("deepseek", "<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>",
              ("<｜end▁of▁sentence｜>", "<|EOT|>")),
)


TYPED = 16  # tokens before a FIM prompt's cursor that the next keystroke may retokenize


@dataclass(frozen=True)
class FimLayout:
    """A model's FIM prompt by token id: `lead` (its BOS, if it adds one), then `prefix`,
    the prefix's text, `suffix`, the suffix's text, `middle`. `stops` end the middle
    (the three FIM tokens among them: a middle never holds one)."""

    name: str
    prefix: int
    suffix: int
    middle: int
    lead: tuple[int, ...]
    stops: frozenset[int]
    encode_text: Callable[[str], list[int]] = field(compare=False, repr=False)

    def prompt(self, prefix: str, suffix: str) -> list[int]:
        """The prompt whose answer is what goes between `prefix` and `suffix`."""
        return [*self.lead, self.prefix, *self.encode_text(prefix), self.suffix, *self.encode_text(suffix),
                self.middle]

    def shareable(self, prompt: list[int]) -> int:
        """How many of `prompt`'s tokens the next keystroke's request shares: the prefix's, the text before
        the cursor, less the last `TYPED` (typing there retokenizes them). A keystroke changes every
        token after the cursor's position, so nothing past it is worth keeping (`Keeper.keep`)."""
        return max(prompt.index(self.suffix) - TYPED, 0) if self.suffix in prompt else 0


def find_layout(tokenizer: Any) -> FimLayout | None:
    """The tokenizer's FIM layout: the first family whose three tokens are each one token
    of its vocabulary; None for a model without them (or a tokenizer without a fast backend)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return None
    for family in FAMILIES:
        ids = [backend.token_to_id(text) for text in (family.prefix, family.suffix, family.middle)]
        if None in ids:
            continue
        ends = {backend.token_to_id(text) for text in family.ends} - {None}
        return FimLayout(family.name, *ids, lead=leading_tokens(tokenizer), stops=frozenset(ends | set(ids)),
                         encode_text=plain_encoder(tokenizer))
    return None


def leading_tokens(tokenizer: Any) -> tuple[int, ...]:
    """What the tokenizer puts before a text of its own accord: its BOS, for many; nothing for Qwen."""
    full = [int(t) for t in tokenizer.encode("a")]
    plain = [int(t) for t in tokenizer.encode("a", add_special_tokens=False)]
    at = next((i for i in range(len(full) - len(plain) + 1) if full[i : i + len(plain)] == plain), 0)
    return tuple(full[:at])


def stop_tokens(layout: FimLayout | None, suffix: str | None) -> frozenset[int]:
    """The tokens that end a completion besides the model's own end: a FIM request's layout's."""
    return layout.stops if layout is not None and suffix is not None else frozenset()

