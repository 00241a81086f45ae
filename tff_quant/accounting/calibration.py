"""A registered mechanism's free parameters that meet a target (ε, δ) for a training run.

Generic over `tff_quant.mechanisms.registry()`: the class declares its tunables
(range, default, which direction is more private) and which ones calibration
searches (`CALIBRATED`). The last searched parameter is bisected along its
privacy direction; any earlier ones (integers) are scanned within the bit budget,
and the feasible candidate with the smallest worst-case variance wins.
"""

import math
from typing import Optional, Sequence, Union

from tff_quant import mechanisms
from tff_quant.accounting import composition
from tff_quant.common import validation

_FAST_ORDERS = tuple(range(2, 33)) + (48, 64)
_OPEN_END_MARGIN = 1e-4   # distance kept from an open end of a bounded range
_UNBOUNDED_SPAN = 1e3     # an unbounded float range is searched up to default · this


def _epsilon(mech, schedule) -> float:
  return composition.training_guarantee(mech, orders=_FAST_ORDERS,
                                        **schedule).epsilon


def _float_interval(spec):
  """Finite (lo, hi) inside a real tunable's range; open ends kept off by a margin.

  A scale parameter ((0, inf) or [0, inf)) is searched over default·[1e-3, 1e3].
  """
  default = abs(spec.default)
  if spec.low == 0 and spec.high is None:
    return default / _UNBOUNDED_SPAN, default * _UNBOUNDED_SPAN
  lo = spec.low if spec.low is not None else -default * _UNBOUNDED_SPAN
  hi = spec.high if spec.high is not None else default * _UNBOUNDED_SPAN
  if spec.low_open:
    lo += _OPEN_END_MARGIN
  if spec.high_open:
    hi -= _OPEN_END_MARGIN
  return lo, hi


def _largest_int_within_bits(build, spec, bits: int) -> int:
  """Largest integer value of `spec` whose mechanism needs <= `bits` bits (monotone)."""
  lo, hi = int(spec.low), int(spec.high)
  if build(lo).bits_per_coordinate > bits:
    return lo - 1
  while lo < hi:
    mid = (lo + hi + 1) // 2
    if build(mid).bits_per_coordinate <= bits:
      lo = mid
    else:
      hi = mid - 1
  return lo


def _search_last(build, spec, target, schedule, bits, iters):
  """The least private value of `spec` with ε <= target (bisection), or None."""
  higher_private = spec.more_private == 'higher'
  eps_at = lambda v: _epsilon(build(v), dict(schedule))
  if spec.kind is int:
    lo, hi = int(spec.low), _largest_int_within_bits(build, spec, bits)
    if hi < lo:
      return None
    safe, unsafe = (hi, lo) if higher_private else (lo, hi)
    if eps_at(safe) > target:
      return None
    if eps_at(unsafe) <= target:
      return unsafe
    while abs(safe - unsafe) > 1:
      mid = (safe + unsafe) // 2
      if eps_at(mid) <= target:
        safe = mid
      else:
        unsafe = mid
    return safe
  lo, hi = _float_interval(spec)
  safe, unsafe = (hi, lo) if higher_private else (lo, hi)
  if bits is not None and build(safe).bits_per_coordinate > bits:
    return None
  if eps_at(safe) > target:
    return None
  if eps_at(unsafe) <= target:
    return unsafe
  for _ in range(iters):
    mid = 0.5 * (safe + unsafe)
    if eps_at(mid) <= target:
      safe = mid
    else:
      unsafe = mid
  return safe


def calibrate(mechanism: str, epsilon: float, delta: float, rounds: int,
              clients_per_round: int, total_clients: int, dim: int = 1,
              clip: Optional[float] = None,
              tune: Union[None, str, Sequence[str]] = None,
              bits: Optional[int] = None, use_pld: bool = False, iters: int = 18,
              l2_clip: Optional[float] = None,
              coordinate_clip: Optional[float] = None, **params):
  """Returns the mechanism `mechanism` calibrated to (ε, δ) for a training run.

  Args:
    mechanism: a name in `tff_quant.mechanisms.registry()`.
    epsilon: target ε of the whole run, > 0.
    delta: target δ in (0, 1).
    rounds: training rounds.
    clients_per_round: clients sampled (without replacement) per round.
    total_clients: population size.
    dim: coordinates each client sends (the accountant's d).
    clip: the coordinate bound c∞ the mechanism is built for (alias of
      `coordinate_clip`; default 1, or l2_clip/√dim when `l2_clip` is given).
    tune: the parameter(s) to search; default the class's `CALIBRATED`. The last
      is bisected along its `more_private` direction (ε is taken to be monotone
      in it); earlier ones must be integers and are scanned within `bits`.
    bits: the most bits per coordinate a candidate may use (None: no limit;
      required when an integer parameter is searched).
    use_pld: also use the PLD route (slower, tighter).
    iters: bisection steps for a real-valued parameter.
    l2_clip: the ℓ2 bound of each update; with c∞ > l2_clip/√dim the ℓ2 route
      accounts the run (`accounting.vector_rdp`).
    coordinate_clip: c∞ (see `clip`).
    **params: the other parameters, fixed (defaults for the omitted ones).

  Returns:
    The calibrated mechanism: among feasible candidates, the one with the
    smallest `worst_case_variance()`.

  Raises:
    ValueError: unknown mechanism or parameter, a parameter without a privacy
      direction, or a target no candidate reaches ("not reachable").
  """
  cls = mechanisms.get(mechanism)
  validation.check_positive('epsilon', epsilon)
  validation.check_optional(validation.check_positive, 'l2_clip', l2_clip)
  if clip is not None and coordinate_clip is not None and clip != coordinate_clip:
    raise ValueError(f'`clip` ({clip}) and `coordinate_clip` ({coordinate_clip}) '
                     'name the same bound; pass one.')
  clip = coordinate_clip if coordinate_clip is not None else clip
  if clip is None:
    clip = 1.0 if l2_clip is None else l2_clip / math.sqrt(dim)
  validation.check_positive('coordinate_clip', clip)
  validation.check_optional(validation.check_integer, 'bits', bits, 1, 64)
  if tune is None:
    tune = cls.CALIBRATED
  tune = (tune,) if isinstance(tune, str) else tuple(tune)
  if not tune:
    raise ValueError(f'{mechanism} declares no calibrated parameter; pass `tune`.')
  specs = [cls.tunable(name) for name in tune]
  for spec in specs:
    if spec.more_private is None and spec is specs[-1]:
      raise ValueError(f'`tune`: {spec.name} of {mechanism} has no privacy direction; '
                       'choose one of '
                       f'{[t.name for t in cls.TUNABLES if t.more_private]}.')
    if spec.kind is int and bits is None:
      raise ValueError(f'`bits` is required to search the integer parameter '
                       f'{spec.name} of {mechanism}.')
    if spec is not specs[-1] and spec.kind is not int:
      raise ValueError(f'`tune`: only the last parameter may be real-valued; '
                       f'{spec.name} of {mechanism} is {spec.kind.__name__}.')
  for name in tune:
    params.pop(name, None)
  fixed = cls.complete_params(params)
  schedule = dict(rounds=rounds, clients_per_round=clients_per_round,
                  total_clients=total_clients, delta=delta, dim=dim, use_pld=use_pld,
                  l2_clip=l2_clip)

  def candidates(prefix, outer):
    """Every grid point of the scanned (outer) integers that fits `bits`."""
    if not outer:
      yield dict(prefix)
      return
    spec = outer[0]
    for value in range(int(spec.low), int(spec.high) + 1):
      trial = dict(prefix, **{spec.name: value})
      probe = cls.for_coordinate_bound(clip, **dict(fixed, **trial))
      if probe.bits_per_coordinate > bits:
        break
      yield from candidates(trial, outer[1:])

  best = None
  for grid_point in candidates({}, specs[:-1]):
    base_params = dict(fixed, **grid_point)
    build = lambda v, b=base_params: cls.for_coordinate_bound(
        clip, **dict(b, **{specs[-1].name: v}))
    value = _search_last(build, specs[-1], epsilon, schedule, bits, iters)
    if value is None:
      continue
    mech = build(value)
    var = mech.worst_case_variance()
    if best is None or var < best[0]:
      best = (var, mech)
  if best is None:
    budget = f' within {bits} bits' if bits is not None else ''
    others = {k: v for k, v in fixed.items() if k not in tune}
    raise ValueError(f'Target ε={epsilon} is not reachable for {mechanism}{budget} '
                     f'even at the most private value of {", ".join(tune)} '
                     f'(other parameters {others}).')
  return best[1]
