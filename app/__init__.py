"""The specmlx terminal chat app: an offline chat that shows speculative decoding at work.

`session`, `settings`, `store`, `tally` and `loader` know nothing of Textual;
`screens/` and `widgets/` know nothing of MLX and only hear from it through messages.
"""
