"""Distributed Skellam (Agarwal, Kairouz, Liu, NeurIPS 2021), as TFF's `DistributedDpSumFactory` runs it.

Each client adds symmetric Skellam noise Z = A - B, A, B ~ Poisson(σ²/2)
independent (variance σ²), to its stochastically rounded coordinate, mod M
(`modular`). Sums of independent Skellams are Skellam, so the n-client noise is
exactly Skellam with variance nσ²: P(Z = k) = e^(-v) I_|k|(v). AKL21 bound its
RDP in closed form (`accounting.bounds.skellam_rdp`); ours is exact.
"""

import math

import numpy as np
from scipy import special

from tff_quant.mechanisms import modular


def skellam_log_pmf(z: np.ndarray, variance: float) -> np.ndarray:
  """log P(Z = z) for symmetric Skellam of variance v: log(e^-v I_|z|(v)).

  I_{k+1}/I_k by the backward recurrence ρ_{k-1} = 1/(2k/v + ρ_k) (stable for
  the decaying solution), started far beyond the largest |z|; log I_k is then
  log I_0 plus a cumulative sum, with full relative precision in the tails.
  The start's error decays like (I_start/I_k)² ≈ e^-(start²/v) for k << √v, so
  starting 8√v out leaves e^-64 (from 4√v, ρ_0 was off by 2e-7 relative).
  """
  if not variance > 0:
    raise ValueError(f'`variance` must be > 0, got {variance}.')
  z = np.abs(np.asarray(z, np.int64))
  top = int(z.max()) if z.size else 0
  start = top + 64 + int(8 * math.sqrt(variance))
  rho = np.empty(top + 1)
  r = variance / (2.0 * (start + 1))
  for k in range(start, 0, -1):
    r = 1.0 / (2.0 * k / variance + r)
    if k - 1 <= top:
      rho[k - 1] = r
  log_i = np.concatenate([[0.0], np.cumsum(np.log(rho[:top]))])
  return _log_ive0(variance) + log_i[z]


def skellam_log_tail(t: int, variance: float) -> float:
  """log of a Chernoff bound on P(|Z| > t) for symmetric Skellam of variance v.

  E e^(λZ) = e^(v(cosh λ - 1)); at λ = asinh(t/v) (the minimiser),
  P(Z >= t) <= exp(v(√(1 + (t/v)²) - 1) - t·asinh(t/v)); twice that for |Z|.
  """
  r = t / variance
  return (math.log(2.0) + variance * (math.sqrt(1.0 + r * r) - 1.0) -
          t * math.asinh(r))


# Above this v, log(e^-v I_0(v)) is taken from its asymptotic series: scipy's
# ive(0, v) returns NaN from v ≈ 2^31 on, and the series' next term is below
# 1e-16 relative from here on (checked against scipy in the tests).
_ASYMPTOTIC_FROM = 1e4


def _log_ive0(v: float) -> float:
  """log(e^-v I_0(v)), v > 0, to full double precision at every v."""
  if v < _ASYMPTOTIC_FROM:
    return math.log(special.ive(0, v))
  # I_0(v) e^-v ~ (2πv)^(-1/2) Σ_k ((2k-1)!!)² / (k! 8^k v^k).
  series = 1 + 1 / (8 * v) + 9 / (128 * v**2) + 225 / (3072 * v**3)
  return -0.5 * math.log(2 * math.pi * v) + math.log(series)


class DistributedSkellam(modular.ModularNoiseMechanism):
  """DistributedSkellam(clip=c, num_levels=M, steps=r, noise_std=σ)."""

  name = 'skellam'

  def noise_log_pmf(self, z):
    return skellam_log_pmf(z, self.noise_std**2)

  @classmethod
  def least_resolvable_noise(cls, num_levels):
    """0: the noise sum's law is closed form at every std."""
    del num_levels
    return 0.0

  def noise_sum_log_error(self, num_clients):
    """Zeros: W_n is the closed form below, no convolution. Its own
    rounding (scipy's ive, the recurrence) is not bounded (docs/privacy.md,
    "Numerics": open, as this mechanism's η)."""
    del num_clients
    return np.zeros(self.m)

  def noise_sum_log_pmf(self, num_clients):
    """Skellam with variance nσ², wrapped mod M (closed form).

    From |z| <= L, L the least (>= M) whose Chernoff bound on the mass
    beyond (`skellam_log_tail`) is below modular.FLOOR_RELATIVE of the
    smallest residue of the |z| <= M law, so no residue moves by more than
    that; at most the full window |z| <= WINDOW_MODULI·M + 40√v."""
    variance = num_clients * self.noise_std**2
    wrapped = lambda half: modular.wrap(
        skellam_log_pmf(np.arange(-half, half + 1), variance), -half, self.m)
    near = wrapped(self.m)
    # Every residue is at least near's smallest (more aliases only add).
    floor = np.min(near) + math.log(modular.FLOOR_RELATIVE)
    full = int(math.ceil(modular.WINDOW_MODULI * self.m + 40 * math.sqrt(variance)))
    if skellam_log_tail(self.m, variance) <= floor:
      return near
    if skellam_log_tail(full, variance) > floor:
      return wrapped(full)
    lo, hi = self.m, full   # tail(lo) > floor >= tail(hi)
    while hi - lo > 1:
      mid = (lo + hi) // 2
      lo, hi = (lo, mid) if skellam_log_tail(mid, variance) <= floor else (mid, hi)
    return wrapped(hi)
