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
import functools
import math

import numpy as np
from scipy import special

from tff_quant.common import exact_laws
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

  def _noise_law(self):
    """(log-pmf, per-entry error bound) of Binomial(m, 1/2), k = 0..m
    (`exact_laws.log_binomial`: proved, not a library's log-pmf)."""
    return exact_laws.log_binomial(self.m, 0.5)

  def _noise_at(self, offsets):
    """log P(N = k) at the integers `offsets` (-inf outside [0, m])."""
    law = self._noise_law()[0]
    inside = (offsets >= 0) & (offsets <= self.m)
    return np.where(inside, law[np.clip(offsets, 0, self.m)], -np.inf)

  def _log_pmf_on(self, x, idx):
    """log P(level i | x) at the level indices `idx`: the noise law
    shifted by the rounded input, mixed over its two values; within
    `log_pmf_error` of exact."""
    # In [-s, s]; clamped because x s / C can round past s (e.g. 0.0015 * 6 / 0.0015).
    t = min(max(self.clip_input(x) * self.s / self.clip, -self.s), self.s)
    low = min(int(np.floor(t)), self.s - 1)
    frac = min(max(t - low, 0.0), 1.0)
    idx = np.asarray(idx, np.int64)
    if frac == 0.0:
      return self._noise_at(idx - (low + self.s))
    if frac == 1.0:
      return self._noise_at(idx - (low + 1 + self.s))
    with np.errstate(divide='ignore'):
      return np.logaddexp(math.log1p(-frac) + self._noise_at(idx - (low + self.s)),
                          math.log(frac) + self._noise_at(idx - (low + 1 + self.s)))

  def _noise_range(self):
    """The noise counts [first, last] that `log_pmf` reads (beyond [0, m]:
    entries with one side of the mixture impossible)."""
    return -1, self.m + 1

  @functools.cached_property
  def log_pmf_error(self) -> float:
    """The noise law's proved error over the counts `log_pmf` reads
    (`exact_laws.log_binomial`), plus the two-point mixture's rounding
    (`exact_laws.two_point_mixture_error`) at inputs off the grid."""
    law, err = self._noise_law()
    first, last = self._noise_range()
    # An entry reads counts i - (u + s), u + s in [0, 2s]: one side of the
    # mixture is impossible only where those leave [0, m].
    one_sided = first < 0 or last > self.m
    first, last = max(first, 0), min(last, self.m)
    used = slice(first, last + 1)
    # The two sides are the law at adjacent counts: |b - a| <= the largest
    # step of the log-law over the counts read.
    gap = float(np.max(np.abs(np.diff(law[used])), initial=0.0))
    return float(np.max(err[used])) + exact_laws.two_point_mixture_error(
        float(np.max(np.abs(law[used]))),
        gap * 1.001 + 2 * float(np.max(err[used])), one_sided)

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
    # Without the caches (compiled encoder, end laws, blankets, η): m's.
    one.__dict__ = {k: v for k, v in self.__dict__.items()
                    if not k.startswith('_') and not isinstance(
                        getattr(type(self), k, None), functools.cached_property)}
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
    missed = _lower_tail_bound(big_m, a) if a else 0.0
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
    """u + s + Binomial(m, 1/2) for the float64 input `sanitize` clipped.

    Inside the support: t = x·s/C is `_log_pmf_on`'s t (float64, the same
    operations up to the compiler's roundings), clamped to [-s, s], snapped
    and rounded there (`base.round_within`), so u is one of the pmf's two
    values at x (u = ±s alone at |x| = C) and the noise is in [0, m]: the
    level is in [0, 2s + m], inside the pmf's support at x. At C = 0.0331 a
    float32 t rounded u to ±2 at s = 1 (u = s + 1 in 1.2e-4 of the draws at
    s = 1024).
    """
    s_round, s_noise = tf.unstack(base.split_seed(seed, 2))
    t = tf.cast(x, tf.float64) * float(self.s) / self.clip
    u = base.round_within(t, -self.s, self.s, s_round)
    noise = base.binomial_half(tf.shape(x), s_noise, self.m, tf.float32)
    return u + self.s + tf.cast(noise, tf.float64)   # integers < 2^24: exact


def _lower_tail_bound(trials: int, a: int) -> float:
  """An upper bound on 2·P(Binomial(trials, 1/2) < a): the proved log-pmf
  (`exact_laws.log_binomial`) raised by its error bound at each count,
  exponentiated (ELEMENTARY_ULPS) and summed by math.fsum (one rounding),
  then rounded up by a relative 1e-12 that covers those roundings."""
  law, err = exact_laws.log_binomial(trials, 0.5)
  if a <= 0:
    return 0.0
  with np.errstate(under='ignore'):
    terms = np.exp(law[:a] + err[:a])
  # Subnormal terms (< e^-708) may lose their relative accuracy: each is
  # bounded by 2^-1022 instead.
  return 2 * (math.fsum(terms) * (1 + 1e-12) + a * 2.0**-1022)


def _largest_lower_cut(trials: int, tail: float) -> int:
  """The largest a in [0, trials/2] with `_lower_tail_bound`(trials, a) <=
  tail (a bound on 2·P(Binomial(trials, 1/2) < a))."""
  law, err = exact_laws.log_binomial(trials, 0.5)
  half = trials // 2
  with np.errstate(under='ignore'):
    terms = np.exp(law[:half] + err[:half])
  cum = np.cumsum(terms)   # a guide only: the bound itself is recomputed
  a = int(np.searchsorted(cum * (1 + 1e-9), tail / 2 * (1 - 1e-9), side='right'))
  a = min(a, half)
  while a > 0 and _lower_tail_bound(trials, a) > tail:
    a -= 1
  while a < half and _lower_tail_bound(trials, a + 1) <= tail:
    a += 1
  return a


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

  def _noise_range(self):
    # Level i = u + s + N with u + s in [0, 2s]: the window reads these counts.
    return self.lo - 2 * self.s, self.hi

  @functools.cached_property
  def log_pmf_error(self) -> float:
    """BQ's bound over the window's counts; the conditioned (normalised)
    law also carries its normaliser's: the window's mass is within the same
    e^(±η), and logsumexp adds its roundings (the shift u/e-weighted, the
    exps and the log 2·ELEMENTARY_ULPS, the window's sum window·u, the
    shift added back u·(Λ + 1)); the subtraction u·(|value| + |log mass|) <=
    u·(2Λ + 2), Λ the largest |log| of the noise law over the window's
    counts (each entry's value is within log 2 of it)."""
    base_err = BQ.log_pmf_error.func(self)
    if not self.normalized:
      return base_err
    u = exact_laws.U
    law = self._noise_law()[0]
    top = float(np.max(np.abs(law[max(self.lo - 2 * self.s, 0):self.hi + 1])))
    rounding = (u * (self.num_levels + 1 + (top + 1) + (2 * top + 2)) +
                4 * exact_laws.ELEMENTARY_ULPS * u)
    return (2 * base_err + rounding) * (1 + 1e-6)

  def _sum_reduction(self, num_clients):
    del num_clients
    return None

  def _conditioned_sum(self, num_clients, tail):
    del num_clients, tail
    return None

  def _encode(self, x, seed):
    raise TypeError('A windowed BQ sum is an accounting bound; it is never sampled.')
