"""The specmlx terminal chat app: an offline chat that shows speculative decoding at work.

`chat` (one chat: its session, its stored conversation, its settings),
`session`, `settings`, `store`, `tally`, `figures` and `loader` know nothing
of Textual; `screens/` and `widgets/` know nothing of MLX and only hear from
it through messages.
"""
