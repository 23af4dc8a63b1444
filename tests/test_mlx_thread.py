"""Every MLX call goes to one thread; generators are stepped and closed there."""

import threading

import pytest

from specmlx.mlx_thread import MLXThread


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
