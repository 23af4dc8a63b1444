"""Small facts read off mlx-lm models."""

from specmlx.vocab import context_window, vocab_size

from . import tiny, tiny_hybrid


def test_settings_are_read_from_the_args_or_their_text_config():
    assert vocab_size(tiny.tiny_qwen(48, seed=0)) == 48
    qwen3_5 = tiny_hybrid.tiny_qwen3_5(40, seed=0)  # its settings sit under `text_config`
    assert not hasattr(qwen3_5.args, "vocab_size")
    assert (vocab_size(qwen3_5), context_window(qwen3_5)) == (40, 4096)
