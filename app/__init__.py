"""The specmlx terminal chat app: an offline chat that shows speculative decoding at work.

`chat` (one chat: its session, its stored conversation, its settings),
`session`, `settings`, `store`, `tally`, `figures` and `loader` know nothing
of Textual; `screens/` and `widgets/` know nothing of MLX and only hear from
it through messages.

This folder is `app` in a checkout (`python -m app`) and installs as
`specmlx_chat` (pyproject's package-dir), so its modules import each other
relatively: they work under either name.
"""
