"""Every MLX call goes to one thread; generators are stepped and closed there."""

import threading

import mlx.core as mx
import pytest

from specmlx.mlx_thread import MLXThread, closed_on_error


def test_calls_and_iteration_run_on_one_thread_and_close_there():
    mlx = MLXThread()
    threads, closed_on = [], []

    def numbers():
        try:
            for i in range(5):
                threads.append(threading.get_ident())
                yield i
        finally:
            closed_on.append(threading.get_ident())

    first = mlx.call(threading.get_ident)
    out = []
    for i in mlx.iterate(numbers()):
        out.append(i)
        if i == 2:
            break  # the consumer stops early: the generator is closed on the MLX thread
    assert out == [0, 1, 2]
    assert set(threads) == {first} == set(closed_on)
    assert first != threading.get_ident()
    mlx.close()


def test_exceptions_come_back_to_the_caller():
    mlx = MLXThread()
    with pytest.raises(ZeroDivisionError):
        mlx.call(lambda: 1 / 0)
    assert mlx.call(lambda: mlx.call(lambda: 7)) == 7  # nested calls do not deadlock
    mlx.close()


def test_a_thread_is_closed_when_its_owner_fails_before_handing_it_on():
    with pytest.raises(ValueError):
        with closed_on_error(MLXThread()) as failed:
            failed.call(lambda: mx.eval(mx.ones(2)))
            raise ValueError("the server could not start")
    with pytest.raises(RuntimeError):  # closed: it takes no more work
        failed.call(lambda: 1)
    with closed_on_error(MLXThread()) as kept:
        pass
    assert kept.call(lambda: 2) == 2
    kept.close()
