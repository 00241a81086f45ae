"""Binomial-noise-aided Quantization (BQ), paper 003 (BQ-SGD), Sec. IV-A.

Per coordinate: x in [-C, C] -> sign/magnitude s-level stochastic quantization
sgn(x) * rho(|x|/C, s), rho in {0, 1/s, ..., 1}, integer value u = sgn(x) s rho in
{-s..s}; then o ~ Binomial(m, 1/2) is added: the client sends u + o in {-s..s+m},
i.e. 2s+m+1 values. We transmit the level index u + o + s in [0, 2s+m].

Departures from the paper (derived from the sampler, checked by Monte Carlo):
* sgn(x) rho(|x|/C) is the same law as unbiased stochastic rounding of x s / C on the
  integer grid (for x < 0 the roles of floor and ceil swap), so one rounding serves.
* The noise is added AFTER the sign is applied (the paper's decoder, eq. (12), applies
  the sign to the noise term too, which is biased for x < 0 unless the server can see
  the sign); here value(i) = (C/s)(i - s - m/2) is unbiased for every x in [-C, C].
* q = 1/2 is fixed (Remark 1's optimal choice); the paper's ε (Lemma 1 / Remark 1)
  uses a De Moivre-Laplace approximation, see accounting.bounds.bq_lemma_1.
"""

import copy
import math

import numpy as np
from scipy import special, stats

from tff_quant.common import validation
from tff_quant.mechanisms import base

tf = base.tf


class BQ(base.Mechanism):
  """BQ(clip=C, s=s, m=m)."""

  name = 'bq'
  unbiased = True
  piecewise_affine = True   # stochastic rounding, then input-free binomial noise
  TUNABLES = (
      # Defaults: the paper's 8-bit row (Table II, b = 8: s = 2, m = 251); a small
      # m leaves outputs impossible for some inputs with large probability.
      base.Tunable('s', 2, 1, 2**20, kind=int, more_private='lower',
                   doc='quantization levels per sign'),
      base.Tunable('m', 251, 0, 2**20, kind=int, more_private='higher',
                   doc='Binomial(m, 1/2) noise trials'),
  )
  CALIBRATED = ('s', 'm')

  def __init__(self, clip: float, s: int, m: int):
    self.clip = float(validation.check_positive('clip', clip))
    self.s = self.tunable('s').check(s)
    self.m = self.tunable('m').check(m)
    # XLA has no binomial kernel; TF's sampler serves more trials.
    self.jit_encode = self.m <= base.POPCOUNT_MAX_TRIALS

  def params(self):
    return dict(clip=self.clip, s=self.s, m=self.m)

  @property
  def num_levels(self):
    return 2 * self.s + self.m + 1

  @property
  def input_bound(self):
    return self.clip

  @property
  def level_step(self):
    return self.clip / self.s

  @property
  def level_offset(self):
    return -self.level_step * (self.s + 0.5 * self.m)

  def log_pmf(self, x):
    return self._log_pmf_on(x, np.arange(self.num_levels))

  def _log_pmf_on(self, x, idx):
    """log P(level i | x) at the level indices `idx`."""
    # In [-s, s]; clamped because x s / C can round past s (e.g. 0.0015 * 6 / 0.0015).
    t = min(max(self.clip_input(x) * self.s / self.clip, -self.s), self.s)
    low = min(int(np.floor(t)), self.s - 1)
    frac = min(max(t - low, 0.0), 1.0)
    with np.errstate(divide='ignore'):
      noise = lambda u: stats.binom.logpmf(idx - (u + self.s), self.m, 0.5)
      return special.logsumexp(
          np.stack([noise(low), noise(low + 1)]), axis=0,
          b=np.array([[1.0 - frac], [frac]]))

  def _sum_reduction(self, num_clients):
    """One client whose noise is every client's: Binomial(n·m, 1/2).

    The n-client sum is [u + Σ_i o_i] + Σ_others u_j: the others' rounded
    inputs are independent of the target, so dropping them is data processing,
    and the bound is attained when they sit on the grid {lC/s} (no rounding).
    Exact for any inputs of the others, and one client's law instead of n.
    """
    if num_clients == 1:
      return None
    one = copy.copy(self)
    # Without the caches (compiled encoder, end laws, blankets): they are m's.
    one.__dict__ = {k: v for k, v in self.__dict__.items()
                    if not k.startswith('_')}
    one.m = self.m * num_clients   # may exceed the tunable's range: never sampled
    return base.SumReduction(
        one, 1, 1, f'the {num_clients} clients\' Binomial({self.m}, 1/2) noise on '
        'the target, the others\' rounded inputs dropped (data processing; '
        'attained with the others on the grid)', exact=True)

  def _conditioned_sum(self, num_clients, tail):
    """The n-client sum conditioned on Y = Σ_j u_j + N in a window W.

    N ~ Binomial(M, 1/2), M = n·m, is every client's noise; each u_j lies in
    [-s, s]. With a the largest integer with 2·P(N < a) <= tail, W = [a - ns,
    M - a + ns] is missed with probability <= tail whatever the inputs. Once
    the others' rounded inputs U_o ∈ [-(n-1)s, (n-1)s] are dropped (joint
    convexity of p^α q^(1-α), then a shift), the window's Rényi sums are at
    most those of the target's u + N over W* = [a - (2n-1)s, M - a +
    (2n-1)s], which lies inside every u's support [u, u + M] when a >= 2ns:
    the windowed sums are finite. docs/privacy.md, "Conditioning on a
    window"."""
    big_m = self.m * num_clients
    a = _largest_lower_cut(big_m, tail)
    if a < 2 * num_clients * self.s:
      return None
    # W* in level indices of the one-client sum with M trials (index z + s).
    lo = a - 2 * num_clients * self.s + 2 * self.s
    hi = big_m - a + 2 * num_clients * self.s
    one = _WindowedSum(self.clip, self.s, big_m, lo, hi)
    # The others at 0 round to 0: the sum is u + (n-1)s + (s + N) in level
    # indices, so W is [a - (n-1)s, M - a + (n+1)s] of the one-client sum.
    spread = (num_clients - 1) * self.s
    named = _WindowedSum(self.clip, self.s, big_m, a - spread,
                         big_m - a + 2 * self.s + spread, normalized=True)
    missed = float(2 * np.exp(stats.binom.logcdf(a - 1, big_m, 0.5))) if a else 0.0
    return base.ConditionedSum(
        one, 1, max(missed, np.finfo(float).tiny),
        f'each coordinate\'s sum conditioned on the window [{a - num_clients * self.s}, '
        f'{big_m - a + num_clients * self.s}] of Σu + Binomial({big_m}, 1/2), '
        f'missed w.p. <= {missed:.3g} for any inputs; the others\' rounded inputs '
        'dropped (joint convexity, then a shift)',
        (a, big_m - a + 2 * num_clients * self.s), named,
        f'others {num_clients - 1} at 0 (the sum conditioned on its window)')

  def critical_inputs(self):
    # Piecewise linear in x with breakpoints on the grid {lC/s}.
    return np.arange(-self.s, self.s + 1) * self.clip / self.s

  def _encode(self, x, seed):
    s_round, s_noise = tf.unstack(base.split_seed(seed, 2))
    u = base.stochastic_round(x * (self.s / self.clip), s_round)
    noise = base.binomial_half(tf.shape(x), s_noise, self.m, x.dtype)
    return u + self.s + noise


def _largest_lower_cut(trials: int, tail: float) -> int:
  """The largest a in [0, trials/2] with 2·P(Binomial(trials, 1/2) < a) <= tail."""
  log_half_tail = math.log(tail / 2)
  lo, hi = 0, trials // 2
  while lo < hi:   # P(N <= a - 1) increases with a
    mid = (lo + hi + 1) // 2
    if stats.binom.logcdf(mid - 1, trials, 0.5) <= log_half_tail:
      lo = mid
    else:
      hi = mid - 1
  return lo


class _WindowedSum(BQ):
  """Accounting only: the one-client sum with `m` trials restricted to the
  level indices [lo, hi] (a sub-stochastic law, see `BQ._conditioned_sum`),
  or conditioned on them (`normalized`); never sampled."""

  def __init__(self, clip: float, s: int, m: int, lo: int, hi: int,
               normalized: bool = False):
    self.clip, self.s, self.m = float(clip), int(s), int(m)
    self.lo, self.hi = int(lo), int(hi)
    self.normalized = bool(normalized)
    self.jit_encode = False

  def params(self):
    return dict(clip=self.clip, s=self.s, m=self.m, lo=self.lo, hi=self.hi,
                normalized=self.normalized)

  def __repr__(self):
    how = 'conditioned on' if self.normalized else 'on'
    return (f'BQ(clip={self.clip!r}, s={self.s}, m={self.m}) {how} the level '
            f'window [{self.lo}, {self.hi}]')

  @property
  def num_levels(self):
    return self.hi - self.lo + 1

  @property
  def level_offset(self):
    return BQ.level_offset.fget(self) + self.lo * self.level_step

  def log_pmf(self, x):
    out = self._log_pmf_on(x, np.arange(self.lo, self.hi + 1))
    return out - special.logsumexp(out) if self.normalized else out

  def _sum_reduction(self, num_clients):
    del num_clients
    return None

  def _conditioned_sum(self, num_clients, tail):
    del num_clients, tail
    return None

  def _encode(self, x, seed):
    raise TypeError('A windowed BQ sum is an accounting bound; it is never sampled.')
