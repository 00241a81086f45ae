"""The one argument validator: TypeError for a wrong type, ValueError for a bad value.

As TFF's own aggregators do. Every message names the argument (`name`, or --name
for a flag) and the allowed set or range, with open ends printed as open.
"""

import math
from typing import Callable, Dict, Iterable, List, Optional

import numpy as np


def _label(name: str) -> str:
  return name if name.startswith('--') else f'`{name}`'


def allowed_range(low=None, high=None, low_open=False, high_open=False) -> str:
  """'[0, 1)', '(0, inf)', ...: the interval as a reader should see it."""
  lo = '(-inf' if low is None else f'{"(" if low_open else "["}{low}'
  hi = 'inf)' if high is None else f'{high}{")" if high_open else "]"}'
  return f'{lo}, {hi}'


def check_number(name: str, value, low=None, high=None, low_open=False,
                 high_open=False, integer=False):
  """Returns `value` if it is a (finite) number in the range, else raises.

  TypeError: not a number (bools are not numbers), or not an integer when
  `integer`. ValueError: NaN/inf, or outside [low, high] (open ends as told).
  """
  allowed = allowed_range(low, high, low_open, high_open)
  kind = 'an integer' if integer else 'a number'
  types = (int, np.integer) if integer else (int, float, np.integer, np.floating)
  if isinstance(value, (bool, np.bool_)) or not isinstance(value, types):
    raise TypeError(f'{_label(name)} must be {kind} in {allowed}, got '
                    f'{value!r} ({type(value).__name__}).')
  if not integer and not math.isfinite(value):
    raise ValueError(f'{_label(name)} must be finite and in {allowed}, got {value!r}.')
  ok = True
  if low is not None:
    ok &= value > low if low_open else value >= low
  if high is not None:
    ok &= value < high if high_open else value <= high
  if not ok:
    raise ValueError(f'{_label(name)} must be in {allowed}, got {value!r}.')
  return value


def check_integer(name: str, value, low=None, high=None):
  """An integer in [low, high] (either end may be None)."""
  return check_number(name, value, low, high, integer=True)


def check_positive(name: str, value):
  """A finite number > 0."""
  return check_number(name, value, 0, None, low_open=True)


def check_probability(name: str, value, low_open=True, high_open=True):
  """A number in (0, 1) (ends closed on request)."""
  return check_number(name, value, 0, 1, low_open=low_open, high_open=high_open)


def check_orders(name: str, orders, low_open: bool = True) -> List[float]:
  """Rényi orders as floats: each a number > 1 (>= 1 unless `low_open`), math.inf
  allowed; a single number or an iterable of them, at least one."""
  items = [orders] if np.isscalar(orders) else list(orders)
  allowed = f'{"(" if low_open else "["}1, inf]'
  out = []
  for a in items:
    if isinstance(a, (bool, np.bool_)) or not isinstance(
        a, (int, float, np.integer, np.floating)):
      raise TypeError(f'{_label(name)} must be numbers in {allowed}, got {a!r}.')
    if not (a > 1 if low_open else a >= 1):   # NaN fails too
      raise ValueError(f'{_label(name)} must be in {allowed}, got {a!r}.')
    out.append(float(a))
  if not out:
    raise ValueError(f'{_label(name)} must hold at least one order in {allowed}.')
  return out


def check_distances(name: str, distances) -> np.ndarray:
  """A 1-d float array of finite distances >= 0."""
  t = np.atleast_1d(np.asarray(distances, np.float64))
  if t.ndim != 1 or not np.all(np.isfinite(t)) or np.any(t < 0):
    raise ValueError(f'{_label(name)} must be finite distances in [0, inf), got '
                     f'{distances!r}.')
  return t


def check_bool(name: str, value) -> bool:
  if not isinstance(value, (bool, np.bool_)):
    raise TypeError(f'{_label(name)} must be a bool, got {value!r} '
                    f'({type(value).__name__}).')
  return bool(value)


def check_one_of(name: str, value, choices: Iterable):
  """`value` if it is one of `choices`, else ValueError listing them."""
  choices = tuple(choices)
  if value not in choices:
    raise ValueError(f'{_label(name)} must be one of {list(choices)}, got {value!r}.')
  return value


def check_at_most(name: str, value, other_name: str, other_value):
  """ValueError unless value <= other_value (two arguments that bound each other)."""
  if value > other_value:
    raise ValueError(f'{_label(name)} ({value}) must be <= {_label(other_name)} '
                     f'({other_value}).')
  return value


def check_optional(check, name: str, value, *args, **kwargs) -> Optional[object]:
  """None passes; anything else goes through `check`."""
  return None if value is None else check(name, value, *args, **kwargs)


def parse_key_values(name: str, text: str,
                     parse: Callable[[str, str], object]) -> Dict[str, object]:
  """'key=value,key=value' (a flag's text) -> {key: parse(key, value)}; an
  entry without '=' is a ValueError naming `name`."""
  out = {}
  for item in filter(None, (part.strip() for part in (text or '').split(','))):
    key, sep, value = item.partition('=')
    if not sep:
      raise ValueError(f'{name} must be key=value entries, got {item!r}.')
    out[key.strip()] = parse(key.strip(), value.strip())
  return out
