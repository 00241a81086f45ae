"""Distributed Skellam (Agarwal, Kairouz, Liu, NeurIPS 2021), as TFF's `DistributedDpSumFactory` runs it.

Each client adds symmetric Skellam noise Z = A - B, A, B ~ Poisson(σ²/2)
independent (variance σ²), to its stochastically rounded coordinate, mod M
(`modular`). Sums of independent Skellams are Skellam, so the n-client noise is
exactly Skellam with variance nσ²: P(Z = k) = e^(-v) I_|k|(v). AKL21 bound its
RDP in closed form (`accounting.bounds.skellam_rdp`); ours is exact.
"""

import functools
import math
from typing import Tuple

import numpy as np

from tff_quant.common import exact_laws
from tff_quant.mechanisms import modular


#: Exponent of the tail bound the normalising window reaches (`_law`): the
#: mass left out is below e^-40 of the whole.
_WINDOW_LOG_TAIL = -40.0


def skellam_log_pmf(z: np.ndarray, variance: float) -> np.ndarray:
  """log P(Z = z) for symmetric Skellam of variance v: log(e^-v I_|z|(v)).

  Args:
    z: integers.
    variance: v > 0.

  Returns:
    float64 array like z (`skellam_log_pmf_with_error` builds it).

  Raises:
    ValueError: `variance` not positive, or too small for the recurrence.
  """
  return skellam_log_pmf_with_error(z, variance)[0]


def skellam_log_pmf_with_error(z: np.ndarray, variance: float,
                               variance_rel_error: float = 0.0
                               ) -> Tuple[np.ndarray, np.ndarray]:
  """(log P(Z = z), a proved bound on each entry's error) for symmetric Skellam.

  The ratios ρ_k = I_(k+1)(v)/I_k(v) by the backward recurrence ρ_(k-1) =
  1/(2k/v + ρ_k) (stable for the decaying solution), started at K = T + 64 +
  8√v with ρ_K taken as v/(2(K+1)) (the truth lies in (v/(2(K+1) + v),
  v/(2(K+1))) since 0 < ρ_(K+1) < 1); T >= max|z| is where the Chernoff tail
  (`skellam_log_tail`) falls below e^-40. Then log(I_k/I_0) = Σ_(j<k) log ρ_j
  (`exact_laws.exact_prefix_sums`) and log P(k) = that less the log of its
  sum over |k| <= T (`exact_laws.log_normaliser`, the mass beyond T as
  `missing`). No library Bessel function is used.

  Error (docs/privacy.md, "Numerics"). Write y_j = log ρ_j and e_j = ỹ_j -
  y_j. One step is y_(j) = F(y_(j+1)) = -log(A + e^y) (A = 2(j+1)/v), whose
  slope lies in (-1, 0), and the computed ρ̃_j is within e^(±θ_j), |θ_j| <=
  3.0003u, of 1/(A + ρ̃_(j+1)) (2k/v, the sum and the quotient round once
  each; A/(A + ρ̃) <= 1). So e_j = θ_j - c̄_(j+1)·e_(j+1) with c̄ in (0, 1)
  (mean value theorem): exactly, with no linearisation.
  * Each entry: |e_j| <= δ_j, δ carried as x = e^δ - 1: x_(j) <= c·x_(j+1)
    + (1 + c·x_(j+1))·3.0004u, c = ρ̃/(A + ρ̃) raised by 1e-12 (where ρ is
    within e^(±δ) of ρ̃, 1/(A + ρ) is within e^(±log1p(c·x)) of 1/(A + ρ̃),
    the upper side the larger). The start's x_K ~ v/(2(K+1)) is damped by
    Π c ≈ e^-(K²/v).
  * A prefix: unrolled down to k, Σ_(j<k) e_j = Σ_(i<k) θ_i·g_i + e_k·h,
    each g_i and h an alternating sum whose terms' sizes (products of c̄'s)
    do not grow, so at most its first term: |g_i| <= 1, |h| <= c̄_k < 1;
    hence |Σ_(j<k) e_j| <= 3.0003u·k + δ_k (the signs alternate: summing
    the entries' bounds instead would grow like u·v·log).
  Each log ρ̃_j adds lib·|log ρ̃_j|, the prefix sums their proved error.

  Where the given v is within a relative ε = `variance_rel_error` of the
  law's (its own rounding: v = n·σ·σ), log P(k) moves by at most
  εv·sup|g|·(1 + 2ε) over the interval, g = d/dv log P(k) = ρ_k + k/v - 1
  (I_k' = I_(k+1) + (k/v)I_k), with |ρ_k(v') - ρ̃_k| <= ρ̃_k·x_k +
  εv·(1 + (2k+1)/v) (ρ_k' = 1 - (2k+1)ρ_k/v - ρ_k², so |ρ_k'| <= 1 +
  (2k+1)/v), |k/v' - k/v| <= 2εk/v, and g's computation 4u(1 + k/v).

  Args:
    z: integers.
    variance: v > 0 (v >= 1e-30: 2k/v stays finite).
    variance_rel_error: ε in [0, 1e-3).

  Returns:
    (log_pmf, error), float64 arrays like z.

  Raises:
    ValueError: an argument out of range (named).
  """
  if not variance > 0:
    raise ValueError(f'`variance` must be > 0, got {variance}.')
  if variance < 1e-30:
    raise ValueError(f'`variance` must be >= 1e-30 (the recurrence\'s 2k/v), got {variance}.')
  if not 0 <= variance_rel_error < 1e-3:
    raise ValueError('`variance_rel_error` must be in [0, 1e-3), got '
                     f'{variance_rel_error}.')
  z = np.abs(np.asarray(z, np.int64))
  top = int(z.max()) if z.size else 0
  v = float(variance)
  values, errors, rho, excess = _law(max(top, _window(v)), v)
  eps = float(variance_rel_error)
  if eps == 0:
    return values[z], errors[z]
  k = z.astype(np.float64)
  u = exact_laws.U
  g = np.abs(rho[z] + k / v - 1)
  slack = (rho[z] * excess[z] + eps * (v + 2 * k + 1) + 2 * eps * k / v +
           4 * u * (1 + k / v))
  return values[z], errors[z] + eps * v * (g + slack) * (1 + 3 * eps)


def _window(variance: float) -> int:
  """The least T (from ⌈9√v⌉ up, doubling) with `skellam_log_tail`(T) <= -40."""
  t = int(math.ceil(9 * math.sqrt(variance))) + 1
  while skellam_log_tail(t, variance) > _WINDOW_LOG_TAIL:
    t *= 2
  return t


@functools.lru_cache(maxsize=16)
def _law(top: int, variance: float):
  """(log P(k), its error, ρ̃_k, x_k), k = 0..top, top >= `_window`(v);
  read-only, cached (`skellam_log_pmf_with_error` has the analysis)."""
  u = exact_laws.U
  lib = 2 * exact_laws.ELEMENTARY_ULPS * u
  start = top + 64 + int(8 * math.sqrt(variance))
  rho = np.empty(top + 1)
  excess = np.empty(top + 1)   # x_k = e^(δ_k) - 1
  r = variance / (2.0 * (start + 1))
  x = r * (1 + 1e-12) + 2.0002 * u * (1 + r)
  step = 3.0004 * u
  grow = 1 + 1e-12
  for k in range(start, 0, -1):
    a = 2.0 * k / variance
    s = a + r
    c = r / s
    r = 1.0 / s
    cx = c * x * grow
    x = cx + (1 + cx) * step
    if k <= top + 1:
      rho[k - 1] = r
      excess[k - 1] = x
  delta = np.log1p(excess) * grow
  t = np.log(rho[:top])
  s, e_s = exact_laws.exact_prefix_sums(t)
  steps = np.arange(1, top + 1, dtype=np.float64)
  recurrence = (3.0003 * u * steps + delta[1:]) * grow
  e_v = np.concatenate([[0.0], e_s + recurrence +
                        np.cumsum(lib * np.abs(t)) * (1 + steps * 4 * u)])
  v = np.concatenate([[0.0], s])
  both = np.concatenate([v[:0:-1], v])
  both_err = np.concatenate([e_v[:0:-1], e_v])
  log_z, e_z = exact_laws.log_normaliser(
      both, both_err, missing=math.exp(skellam_log_tail(top, variance) + 1e-9))
  out = v - log_z
  err = (e_v + e_z + u * np.abs(out)) * (1 + 4 * u)
  for a in (out, err, rho, excess):
    a.setflags(write=False)
  return out, err, rho, excess


def skellam_log_tail(t: int, variance: float) -> float:
  """log of a Chernoff bound on P(|Z| > t) for symmetric Skellam of variance v.

  E e^(λZ) = e^(v(cosh λ - 1)); at λ = asinh(t/v) (the minimiser),
  P(Z >= t) <= exp(v(√(1 + (t/v)²) - 1) - t·asinh(t/v)); twice that for |Z|.
  """
  r = t / variance
  return (math.log(2.0) + variance * (math.sqrt(1.0 + r * r) - 1.0) -
          t * math.asinh(r))


class DistributedSkellam(modular.ModularNoiseMechanism):
  """DistributedSkellam(clip=c, num_levels=M, steps=r, noise_std=σ)."""

  name = 'skellam'

  def _variance(self, num_clients: int = 1) -> float:
    """n·(σ·σ): within 2.0001u relative of nσ² (two roundings)."""
    return num_clients * (self.noise_std * self.noise_std)

  def noise_log_pmf(self, z):
    return skellam_log_pmf(z, self._variance())

  def noise_log_pmf_error(self, z):
    """[z.size] proved bounds on |noise_log_pmf(z) - log P(Z = z)|, Z
    Skellam of variance σ² (`skellam_log_pmf_with_error`, σ·σ's rounding as
    the variance's relative error u)."""
    return skellam_log_pmf_with_error(z, self._variance(), 1.0001 * exact_laws.U)[1]

  def noise_log_tail(self, t: int) -> float:
    """log of an upper bound on P(|Z| > t): the Chernoff bound
    (`skellam_log_tail`, increasing in v) at v raised by 4u, and 1e-12 plus
    1e-14 of its size for its own roundings."""
    value = skellam_log_tail(t, self._variance() * (1 + 4 * exact_laws.U))
    return value + 1e-12 + 1e-14 * abs(value)

  @classmethod
  def least_resolvable_noise(cls, num_levels):
    """0: the noise sum's law is closed form at every std."""
    del num_levels
    return 0.0

  def noise_sum_log_pmf(self, num_clients):
    """Skellam with variance nσ², wrapped mod M (closed form).

    From |z| <= L, L the least (>= M) whose Chernoff bound on the mass
    beyond (`skellam_log_tail`) is below modular.FLOOR_RELATIVE of the
    smallest residue of the |z| <= M law, so no residue moves by more than
    that; at most the full window |z| <= WINDOW_MODULI·M + 40√v."""
    return self._closed_sum(num_clients)[0]

  def noise_sum_log_error(self, num_clients):
    """[M] proved bounds on |`noise_sum_log_pmf`(n) - log W_n|: the window's
    entries within `skellam_log_pmf_with_error` (the variance n·σ·σ within
    2.0001u), wrapped by `modular.wrap_with_error`, and the aliases beyond
    the window L (mass <= the Chernoff bound at L) over each residue's
    exact value (>= e^(min(w - error))), in log by log1p of it."""
    return self._closed_sum(num_clients)[1]

  def _closed_sum(self, num_clients: int) -> Tuple[np.ndarray, np.ndarray]:
    """(W_n, its proved error), cached per n."""
    cache = self.__dict__.setdefault('_closed_cache', {})
    if num_clients in cache:
      return cache[num_clients]
    variance = self._variance(num_clients)
    rel = 2.0001 * exact_laws.U

    def wrapped(half):
      z = np.arange(-half, half + 1)
      values, errors = skellam_log_pmf_with_error(z, variance, rel)
      return modular.wrap_with_error(values, errors, -half, self.m)

    tail = lambda t: skellam_log_tail(t, variance * (1 + 4 * exact_laws.U))
    near = wrapped(self.m)
    # Every residue is at least near's smallest (more aliases only add).
    floor = np.min(near[0]) + math.log(modular.FLOOR_RELATIVE)
    full = int(math.ceil(modular.WINDOW_MODULI * self.m + 40 * math.sqrt(variance)))
    if tail(self.m) <= floor:
      half, law = self.m, near
    elif tail(full) > floor:
      half, law = full, wrapped(full)
    else:
      lo, hi = self.m, full   # tail(lo) > floor >= tail(hi)
      while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if tail(mid) <= floor else (mid, hi)
      half, law = hi, wrapped(hi)
    w, err = law
    lowest = float(np.min(w - err))
    aliases = math.exp(min(tail(half) + 1e-12 - lowest, 0.0))
    cache[num_clients] = (w, err + 1.01 * math.log1p(aliases))
    return cache[num_clients]
