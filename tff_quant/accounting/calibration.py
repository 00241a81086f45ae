"""Find each mechanism's free parameter meeting a target (ε, δ) for a training run."""

import math
from typing import Callable, Optional

from tff_quant import mechanisms
from tff_quant.accounting import composition

_FAST_ORDERS = tuple(range(2, 33)) + (48, 64)


def _epsilon(mech, schedule) -> float:
  return composition.training_guarantee(
      mech, orders=_FAST_ORDERS, use_pld=schedule.pop('use_pld', False),
      **schedule).epsilon


def _bisect(build: Callable[[float], object], lo: float, hi: float,
            target: float, schedule: dict, increasing: bool, iters: int = 18):
  """Largest (increasing) / smallest (decreasing) parameter with ε <= target."""
  eps_at = lambda v: _epsilon(build(v), dict(schedule))
  safe, unsafe = (lo, hi) if increasing else (hi, lo)
  if eps_at(safe) > target:
    raise ValueError(f'Target ε={target} is not reachable even at the most private '
                     f'parameter value {safe}.')
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
              num_levels: int = 16, clip: float = 1.0, delta_ratio: float = 1.0,
              bits: Optional[int] = None, use_pld: bool = False):
  """Returns the calibrated mechanism for a target (ε, δ).

  rqm: q for Δ = delta_ratio·c; pbm: θ; qmgeo (full_support): p;
  quantized_gaussian: σ; bq: (s, m) with 2s+m+1 <= 2^bits levels, smallest variance.
  """
  if not epsilon > 0:
    raise ValueError(f'`epsilon` must be > 0, got {epsilon!r}.')
  schedule = dict(rounds=rounds, clients_per_round=clients_per_round,
                  total_clients=total_clients, delta=delta, dim=dim,
                  use_pld=use_pld)
  m = num_levels
  if mechanism == 'rqm':
    q = _bisect(lambda v: mechanisms.RQM(clip, delta_ratio * clip, m, v),
                1e-4, 1 - 1e-4, epsilon, schedule, increasing=True)
    return mechanisms.RQM(clip, delta_ratio * clip, m, q)
  if mechanism == 'pbm':
    theta = _bisect(lambda v: mechanisms.PBM(clip, m, v), 1e-4, 0.5, epsilon,
                    schedule, increasing=True)
    return mechanisms.PBM(clip, m, theta)
  if mechanism == 'qmgeo':
    p = _bisect(lambda v: mechanisms.QMGeo(clip, m, v, full_support=True),
                1e-4, 1 - 1e-4, epsilon, schedule, increasing=True)
    return mechanisms.QMGeo(clip, m, p, full_support=True)
  if mechanism == 'quantized_gaussian':
    sigma = _bisect(lambda v: mechanisms.QuantizedGaussian(2 * clip, m, v),
                    1e-3 * clip, 1e3 * clip, epsilon, schedule, increasing=False)
    return mechanisms.QuantizedGaussian(2 * clip, m, sigma)
  if mechanism == 'bq':
    if bits is None:
      bits = max(2, math.ceil(math.log2(m)))
    best = None
    top = 2**bits - 1
    for s in range(1, top // 2 + 1):
      for noise in range(0, top - 2 * s + 1):
        mech = mechanisms.BQ(clip, s, noise)
        if _epsilon(mech, dict(schedule)) <= epsilon:
          var = (noise / 4 + 0.25) / s**2
          if best is None or var < best[0]:
            best = (var, mech)
          break
    if best is None:
      raise ValueError(f'No BQ (s, m) with {bits} bits meets ε={epsilon}.')
    return best[1]
  raise ValueError("`mechanism` must be one of 'rqm', 'pbm', 'bq', 'qmgeo', "
                   f"'quantized_gaussian', got {mechanism!r}.")
