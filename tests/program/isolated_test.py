"""Tests of tff_quant.program.isolated (targets from the standard library, so
the spawned child imports nothing of the tests)."""

import math
import operator
import os
import time

import pytest

from tff_quant.program import isolated


def test_the_targets_value_comes_back():
  out = isolated.call_in_child(operator.add, (2, 3), limit_s=60)
  assert out.ended == isolated.RETURNED
  assert out.value == 5
  assert out.exitcode == 0
  assert 0 < out.seconds < 60


def test_a_child_that_dies_is_noticed_at_the_next_poll_not_at_the_limit():
  start = time.perf_counter()
  out = isolated.call_in_child(os._exit, (3,), limit_s=120, poll_s=0.2)  # pylint: disable=protected-access
  assert out.ended == isolated.DIED
  assert out.exitcode == 3
  assert out.value is None
  assert time.perf_counter() - start < 60   # the limit was 120 s


def test_a_child_still_running_at_the_limit_is_stopped_and_reaped():
  out = isolated.call_in_child(time.sleep, (600,), limit_s=3, poll_s=0.5)
  assert out.ended == isolated.STOPPED
  assert out.seconds == 3
  assert out.value is None


def test_the_targets_exception_is_raised_in_the_caller():
  with pytest.raises(ValueError, match='math domain error'):
    isolated.call_in_child(math.sqrt, (-1.0,), limit_s=60)


@pytest.mark.parametrize('kwargs, name', [(dict(limit_s=0), 'limit_s'),
                                          (dict(limit_s=-1.0), 'limit_s'),
                                          (dict(poll_s=0), 'poll_s')])
def test_bad_limits_are_refused_naming_the_parameter(kwargs, name):
  with pytest.raises(ValueError, match=name):
    isolated.call_in_child(operator.add, (1, 2), **kwargs)
