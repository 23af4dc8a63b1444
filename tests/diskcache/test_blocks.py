"""The hash chain: a block's hash names every token up to its end, and nothing else."""

from specmlx.diskcache.blocks import BLOCK, ROOT, block_hash, chain


def test_blocks_cover_the_tokens_in_order_the_last_one_partial():
    tokens = list(range(2 * BLOCK + 10))
    blocks = chain(tokens)
    assert [(b.start, b.end) for b in blocks] == [(0, BLOCK), (BLOCK, 2 * BLOCK), (2 * BLOCK, 2 * BLOCK + 10)]
    assert [t for b in blocks for t in b.tokens] == tokens
    assert blocks[0].parent == ROOT
    assert [b.parent for b in blocks[1:]] == [b.hash for b in blocks[:-1]]


def test_a_shared_prefix_shares_its_blocks_and_no_more():
    a = chain(list(range(600)))
    b = chain(list(range(300)) + [9] * 300)  # differs from position 300, in the second block
    assert a[0] == b[0]
    assert a[1].hash != b[1].hash and a[2].hash != b[2].hash


def test_a_block_depends_on_everything_before_it():
    """The same tokens after another prefix are another block."""
    a = chain([1] * BLOCK + [5, 6, 7])
    b = chain([2] * BLOCK + [5, 6, 7])
    assert a[1].tokens == b[1].tokens and a[1].hash != b[1].hash


def test_a_partial_block_is_keyed_by_its_exact_tokens():
    kept = chain(list(range(BLOCK + 20)))[-1]
    longer = list(range(BLOCK + 40))
    assert block_hash(kept.parent, longer[kept.start : kept.end]) == kept.hash
    assert block_hash(kept.parent, longer[kept.start : kept.end + 1]) != kept.hash
    assert block_hash(kept.parent, (0,)) != block_hash(kept.parent, (0, 0))


def test_the_chain_is_stable_across_runs():
    """Hashes are written to disk: they must not depend on the process (no `hash()`, no seed)."""
    assert chain([1, 2, 3])[0].hash == "374d429ee174762e85d14ea494b50c91a44a1557227814f14650940d7e283790"
