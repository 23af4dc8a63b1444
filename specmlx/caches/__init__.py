"""The caches: what a model keeps of the positions it has read, for one stream or a batch's rows.

Every kind of layer cache the engine meets is read here and nowhere else (`kinds.py`): a plain KV layer
(rows are positions, rewound by an offset), a quantized one (`--kv-bits`), a recurrent layer (a state,
rewound by a replay: `recurrent.py`, `replay.py`), and their batch forms (`batch.py`, `batch_quantized.py`,
`batch_recurrent.py`). `stream.py`'s `Stream` is a single stream's layers with their kinds read once, and
its verbs (length, rewind, reachable, clear, take rows, copy a prefix, bytes held, the chunks of a
prefill, where a next turn resumes); `snapshot.py` a span of a stream as named arrays and back (what
the disk keeps).
"""
