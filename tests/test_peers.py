"""One process's peers: nothing to keep in step with."""

from specmlx.peers import ALONE


def test_one_process_keeps_nothing_in_step():
    assert ALONE.one_process
    tokens = object()
    assert ALONE.propose(tokens, looked_up=False) is tokens
