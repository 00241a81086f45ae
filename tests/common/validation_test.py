import math

import numpy as np
import pytest

from tff_quant.common import validation as v


@pytest.mark.parametrize('args, text', [
    ((None, None, False, False), '(-inf, inf)'),
    ((0, None, True, False), '(0, inf)'),
    ((0, None, False, False), '[0, inf)'),
    ((0, 1, True, True), '(0, 1)'),
    ((1, 16, False, False), '[1, 16]'),
    ((None, 0.5, False, True), '(-inf, 0.5)')])
def test_allowed_range_prints_open_ends_as_open(args, text):
  assert v.allowed_range(*args) == text


def test_check_number_types_and_values():
  assert v.check_number('x', 3, 0, 5) == 3
  assert v.check_number('x', np.float32(0.5), 0, 1) == np.float32(0.5)
  assert v.check_integer('n', np.int64(4), 1) == 4
  for bad in ('a', None, True, [1]):
    with pytest.raises(TypeError, match=r'`x` must be a number in \(0, inf\)'):
      v.check_positive('x', bad)
  with pytest.raises(TypeError, match=r'`n` must be an integer in \[1, inf\)'):
    v.check_integer('n', 2.0, 1)
  with pytest.raises(ValueError, match=r'`x` must be finite and in \(0, inf\)'):
    v.check_positive('x', math.inf)
  with pytest.raises(ValueError, match='finite'):
    v.check_number('x', math.nan)
  with pytest.raises(ValueError, match=r'`q` must be in \(0, 1\), got 1'):
    v.check_probability('q', 1)
  assert v.check_probability('q', 1, high_open=False) == 1
  with pytest.raises(ValueError, match=r'--rounds must be in \[1, inf\), got 0'):
    v.check_integer('--rounds', 0, 1)


def test_bool_choice_order_and_optional():
  assert v.check_bool('b', np.bool_(True)) is True
  with pytest.raises(TypeError, match='`b` must be a bool'):
    v.check_bool('b', 1)
  assert v.check_one_of('m', 'a', ('a', 'b')) == 'a'
  with pytest.raises(ValueError, match=r"`m` must be one of \['a', 'b'\], got 'c'"):
    v.check_one_of('m', 'c', ('a', 'b'))
  with pytest.raises(ValueError, match=r'`n` \(5\) must be <= `total` \(4\)'):
    v.check_at_most('n', 5, 'total', 4)
  assert v.check_optional(v.check_positive, 'x', None) is None
  with pytest.raises(ValueError, match='`x`'):
    v.check_optional(v.check_positive, 'x', -1.0)


def test_orders_and_distances():
  assert v.check_orders('orders', [2, math.inf]) == [2.0, math.inf]
  assert v.check_orders('alpha', 1, low_open=False) == [1.0]
  for bad in ([1.0], [math.nan], [0.5, 2.0]):
    with pytest.raises(ValueError, match=r'`orders` must be in \(1, inf\]'):
      v.check_orders('orders', bad)
  with pytest.raises(ValueError, match='at least one'):
    v.check_orders('orders', [])
  with pytest.raises(TypeError, match='`orders`'):
    v.check_orders('orders', ['2'])
  assert v.check_distances('t', 0.5).tolist() == [0.5]
  for bad in ([-0.1], [math.nan], [[0.1]]):
    with pytest.raises(ValueError, match=r'`t` must be finite distances in \[0, inf\)'):
      v.check_distances('t', bad)
