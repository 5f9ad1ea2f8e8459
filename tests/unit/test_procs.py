"""procs.wait_until: the one poll-with-deadline the tests and the process starter share."""

import itertools

import pytest
from floodway.operator.procs import wait_until


def test_returns_the_first_truthy_value():
    values = iter([0, None, {}, {"ready": True}])
    assert wait_until(lambda: next(values), 5, "a value", interval_s=0) == {"ready": True}


def test_times_out_naming_what_and_the_last_value():
    counter = itertools.count()
    with pytest.raises(TimeoutError, match=r"waiting for the moon \(last: 0\)"):
        wait_until(lambda: 0 * next(counter), 0.05, "the moon", interval_s=0.01)
    assert next(counter) > 1  # it polled more than once


def test_an_exception_from_the_check_stops_the_wait():
    def dead():
        raise RuntimeError("the process exited")

    with pytest.raises(RuntimeError, match="exited"):
        wait_until(dead, 5, "a dead process")
