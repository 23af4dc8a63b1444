"""Images in a prompt, for targets with a vision tower (Qwen3.5, Qwen3.6 and Gemma 4 checkpoints).

The tower (`tower.py`; each family's in `qwen.py` and `gemma.py`, mlx-vlm's) turns each image into rows
of the target's input embeddings, one row per image token; the chat template places one image token per
image, which `images.py` widens to the image's rows (framed by the tokens a family's processor puts
around them). Everything after that is the text engine's: the prefill feeds the prompt's embeddings,
the rounds draft and verify as ever.

Positions are the one subtlety, and Qwen's alone (Gemma 4's are the tokens' indices). Qwen's targets place an image's rows on a grid (multimodal RoPE:
time, height and width, `positions.py`), so an image advances the position by its grid's longest side,
fewer than its rows, and text after it sits at a position below its index in the cache. mlx-lm's text
model rotates every token at its cache index. A rotation by a position is relative: shifting every
position of a sequence by one constant leaves every attention score as it was. So an image prompt is
prefilled at its own positions shifted up by what its images took back (`Images.shift`), with the
attention layers' rotation swapped for the multimodal one for that prefill alone (`rope.py`); its last
token then sits at its cache index, and every token after it, the answer's and a later turn's, is
rotated by the text model's own rotation, unchanged. The cost: a cache holds positions shifted by its
prompt's images, so it serves only prompts whose images shift them alike (`images.agreement`): a turn
that adds an image reads its conversation again (Gemma 4's keeps what precedes the image), and an image
prompt is never kept on disk.
"""
