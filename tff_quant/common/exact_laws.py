"""Input laws with a proved per-entry error: the binomial log-pmf.

The accountant's bound is only as exact as the laws it is given
(docs/privacy.md, "Numerics"). A library log-pmf carries no error bound
(scipy's `binom.logpmf` is off by 1e-10..1e-9 in log at 1e5..1e6 trials, and
the proved RDP then fell below the exact one: issue 61). Here the binomial
log-pmf is built from operations whose rounding is bounded, and every entry
comes with a rigorous bound on |computed - exact| (absolute, in log).

Model of arithmetic (Higham 2002, Sec. 2.2; docs/references.md): +, -, ×, /
and conversions are correctly rounded (IEEE 754 binary64, unit roundoff
u = 2^-53); exp, log and log1p (numpy's and the C library's) are within
ELEMENTARY_ULPS ulps of the exact value, an ulp of y being at most 2u|y|
(glibc documents 1 ulp for these on x86-64; 4 is the assumption carried).

Construction (`log_binomial`), N trials, success probability p, anchor k0
(the mode; any anchor is valid):
  t_j = log(C(N, j+1)/C(N, j)) = log((N-j)/(j+1)), j = 0..N-1, as
        log1p((N-2j-1)/(j+1)) where that argument is >= -1/2, else
        log((N-j)/(j+1)) (integers < 2^53 are exact in float64);
  S_k = Σ_{j=k0}^{k-1} t_j (k > k0), -Σ_{j=k}^{k0-1} t_j (k < k0): each t_j
        split into a multiple of 2^-30 and a remainder on a 2^-K grid, both
        summed as int64 (exactly), so a partial sum is rounded once;
  v_k = S_k + (k - k0)·L, L = log(p/(1-p));
  log P(k) = v_k - log Σ_j e^(v_j) (the sum by math.fsum, e^(v_k0) = 1).
Each step's error is bounded in `log_binomial`'s code, entry by entry.
"""

import functools
import math
from typing import Optional, Tuple

import numpy as np
from scipy import special

from tff_quant.common import validation

#: Unit roundoff of float64.
U = 2.0**-53
#: Assumed accuracy of exp, log, log1p, in ulps (module docstring).
ELEMENTARY_ULPS = 4.0
_LIB = 2.0 * ELEMENTARY_ULPS * U   # relative error of one elementary function
_HIGH_BITS = 30                     # the exact part of a term: a multiple of 2^-30


def _grid_bits(trials: int) -> int:
  """K with trials·2^(K-31) < 2^62: the remainders' int64 sums cannot overflow."""
  return 92 - max(1, (trials + 1).bit_length())


def exact_prefix_sums(terms: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
  """(s, err): s[i] ≈ Σ_{l<=i} terms[l], |s[i] - Σ_{l<=i} terms[l]| <= err[i].

  Each term is split into h = round(t·2^30)/2^30 and the remainder r = t - h
  (exact: h is within a factor 2 of t or 0, Sterbenz); h·2^30 (an integer,
  |h·2^30| <= |t|·2^30 + 1/2) and r·2^K (|r| <= 2^-31, rounded to an integer,
  error <= 1/2 each) are summed as int64, exactly: max|t|·N < 2^32 keeps the
  first below 2^62, K keeps the second below 2^61. A prefix is then two int64 → float64 conversions
  (relative error u each) and one addition (u): err = grid rounding so far
  + u·(|H| + |R|)·(1 + u) + u·|s|.

  Args:
    terms: [N] finite float64 values, N < 2^27, max|t|·N < 2^32 (the int64
      sums then stay below 2^62).

  Returns:
    (s, err), two [N] float64 arrays.

  Raises:
    ValueError: a term not finite or too large.
  """
  terms = np.asarray(terms, np.float64)
  if terms.size == 0:
    return np.zeros(0), np.zeros(0)
  if terms.size >= 2**27:
    raise ValueError(f'`terms` must hold fewer than 2^27 values, got {terms.size}.')
  largest = float(np.max(np.abs(terms))) if np.all(np.isfinite(terms)) else math.inf
  if not largest * terms.size < 2.0**32:
    raise ValueError('`terms` must be finite with max|t|·N below 2^32 (the '
                     f'int64 sums), got max|t| = {largest:g} over N = {terms.size}.')
  bits = _grid_bits(terms.size)
  high = np.round(np.ldexp(terms, _HIGH_BITS))            # exact integers
  rest = terms - np.ldexp(high, -_HIGH_BITS)              # exact
  scaled = np.ldexp(rest, bits)
  rest_int = np.round(scaled)
  # Each rounding to the grid is <= 2^-(K+1): the first i+1 cost (i+1)·2^-(K+1).
  grid = np.arange(1, terms.size + 1, dtype=np.float64) * 2.0**-(bits + 1)
  h_sum = np.cumsum(high.astype(np.int64))
  r_sum = np.cumsum(rest_int.astype(np.int64))
  h_val = np.ldexp(h_sum.astype(np.float64), -_HIGH_BITS)
  r_val = np.ldexp(r_sum.astype(np.float64), -bits)
  s = h_val + r_val
  err = (grid * (1 + 4 * U) + U * (1 + 4 * U) * (np.abs(h_val) + np.abs(r_val))
         + U * np.abs(s))
  return s, err * (1 + 8 * U)


def _ratio_terms(trials: int) -> Tuple[np.ndarray, np.ndarray]:
  """(t, e): t_j ≈ log((N-j)/(j+1)), j = 0..N-1, |t_j - exact| <= e_j.

  log1p path (δ = (N-2j-1)/(j+1) >= -1/2): δ̃ = δ(1 + θ), |θ| <= u, so
  |log1p(δ̃) - log1p(δ)| <= u|δ|/(1 + min(δ, δ̃)) <= 2.0001·u·min(|δ|, 1);
  log path: |log(r̃) - log(r)| = |log(1 + θ)| <= 1.0001·u; plus the
  function's own ELEMENTARY_ULPS ulps of the result.
  """
  j = np.arange(trials, dtype=np.float64)
  num, den = trials - j, j + 1.0
  delta = (num - den) / den
  near = delta >= -0.5
  with np.errstate(divide='ignore'):
    t = np.where(near, np.log1p(np.maximum(delta, -0.5)), np.log(num / den))
  e = (np.where(near, 2.0001 * U * np.minimum(np.abs(delta), 1.0), 1.0001 * U)
       + _LIB * np.abs(t))
  return t, e


def _log_odds(p: float) -> Tuple[float, float]:
  """(L̃, e_L): L = log(p/(1-p)) and a bound on |L̃ - L|, 0 < p < 1.

  p in [1/4, 3/4]: L = log1p(δ), δ = (2p-1)/(1-p) in [-2/3, 2], three
  roundings (2p is exact): |δ̃ - δ| <= 3.01u|δ|, so the argument's share is
  <= 3.01u|δ|/(1/3 - 4u) <= 9.1u|δ|. Else log(p) - log1p(-p) (-p exact):
  each function's ulps and the subtraction's u.
  """
  if p == 0.5:
    return 0.0, 0.0
  if 0.25 <= p <= 0.75:
    delta = (2.0 * p - 1.0) / (1.0 - p)
    value = math.log1p(delta)
    return value, 9.1 * U * abs(delta) + _LIB * abs(value)
  lp, lq = math.log(p), math.log1p(-p)
  value = lp - lq
  return value, _LIB * (abs(lp) + abs(lq)) * (1 + U) + U * abs(value) * (1 + U)


@functools.lru_cache(maxsize=64)
def _cached(trials: int, p: float) -> Tuple[np.ndarray, np.ndarray]:
  out = _log_binomial(trials, p)
  for a in out:
    a.setflags(write=False)
  return out


def log_binomial(trials: int, p: float) -> Tuple[np.ndarray, np.ndarray]:
  """log P(Binomial(trials, p) = k), k = 0..trials, with a proved error bound.

  Args:
    trials: N, an integer in [0, 2^27) (|t_j| <= log N < 32 and the exact
      int64 partial sums stay below 2^62).
    p: the success probability, in [0, 1] (the law at this float64 p).

  Returns:
    (log_pmf, err): two read-only [N + 1] float64 arrays; -inf where a count
    is impossible (p = 0 or 1), and |log_pmf[k] - log P(k)| <= err[k] at
    every finite entry (0 at the others). Cached.

  Raises:
    ValueError: `trials` or `p` out of range (named).
  """
  trials = validation.check_integer('trials', trials, 0, 2**27 - 1)
  p = float(validation.check_number('p', p, 0, 1))
  return _cached(trials, p)


def _log_binomial(trials: int, p: float) -> Tuple[np.ndarray, np.ndarray]:
  """`log_binomial` uncached (module docstring: the construction)."""
  if trials == 0 or p in (0.0, 1.0):
    out = np.full(trials + 1, -np.inf)
    out[0 if p == 0.0 or trials == 0 else trials] = 0.0
    return out, np.zeros(trials + 1)
  if trials == 1:   # [log(1-p), log p]: one function each (-p is exact)
    out = np.array([math.log1p(-p), math.log(p)])
    return out, _LIB * np.abs(out) * (1 + 1e-6)
  k0 = min(trials, max(0, int(math.floor((trials + 1) * p))))
  t, e_t = _ratio_terms(trials)
  s = np.zeros(trials + 1)
  e_s = np.zeros(trials + 1)
  if k0 < trials:   # S_k for k > k0: Σ t_{k0..k-1}
    up, up_err = exact_prefix_sums(t[k0:])
    s[k0 + 1:] = up
    e_s[k0 + 1:] = up_err + np.cumsum(e_t[k0:]) * (1 + trials * 4 * U)
  if k0 > 0:        # S_k for k < k0: -Σ t_{k..k0-1}
    down, down_err = exact_prefix_sums(t[:k0][::-1])
    s[:k0] = -down[::-1]
    e_s[:k0] = (down_err + np.cumsum(e_t[:k0][::-1]) *
                (1 + trials * 4 * U))[::-1]
  lodds, e_l = _log_odds(p)
  d = np.arange(trials + 1, dtype=np.float64) - k0   # exact
  dl = d * lodds
  v = s + dl
  # |dL̃ - dL| <= |d|e_L + u|dL̃|; the addition u|v|.
  e_v = (e_s + np.abs(d) * e_l + U * np.abs(dl) * (1 + U) + U * np.abs(v)) * (1 + 4 * U)
  log_z, e_z = log_normaliser(v, e_v)   # v_k0 = 0 exactly
  out = v - log_z
  err = (e_v + e_z + U * np.abs(out)) * (1 + 4 * U)
  return out, err


def log_normaliser(v: np.ndarray, v_error: np.ndarray,
                   missing: float = 0.0) -> Tuple[float, float]:
  """(log Z̃, e): log Z = log Σ_k e^(v_k) with a proved bound |log Z̃ - log Z| <= e.

  Each computed ṽ_k is within e_k of exact, and some ṽ_k is exactly 0 (so
  Z >= 1). Each e^(ṽ_k) is within e^(±e_k) of e^(v_k) and exp adds its
  lib; terms below e^-700 (exp's relative bound may fail in the subnormals)
  are each < e^-700 however computed; math.fsum rounds the sum once (u) and
  log adds lib·|log Z̃| + u. Where the exact Z also holds mass outside the
  window, at most a fraction `missing` of the whole (a tail bound), the
  window's sum is within (1 - missing) of it: -log1p(-missing) more.

  Args:
    v: [K] the computed exponents (finite or -inf; one exactly 0).
    v_error: [K] bounds on |ṽ_k - v_k| (0 at -inf entries).
    missing: a bound on the mass outside the window over the whole, in [0, 1).

  Returns:
    (log Z̃, e), floats.
  """
  with np.errstate(under='ignore'):
    w = np.exp(v)
    spread = math.fsum(w * np.expm1(np.asarray(v_error) + _LIB * 1.01)) * (1 + 1e-6)
  z = math.fsum(w)
  low = max(z * (1 - U) - spread, 1.0)
  rel = (spread + z * U + 2 * len(w) * math.exp(-700)) / low
  log_z = math.log(z)
  e_z = (-math.log1p(-rel) * (1 + 1e-6) + _LIB * abs(log_z) + U -
         math.log1p(-missing) * (1 + 1e-6))
  return log_z, e_z


#: |log f| for a float f in (0, 1): at most 1075·log 2 < 745.2; |log(1 - f)|
#: at most 53·log 2 < 36.8 (f <= 1 - 2^-53).
LOG_FLOAT_MAX = 745.2
_LOG_WEIGHT_MAX = LOG_FLOAT_MAX
_LOG_COMPLEMENT_MAX = 36.8


def two_point_mixture_error(term_max: float, gap_max: Optional[float] = None,
                            one_sided: bool = True) -> float:
  """A bound on the rounding of log((1-f)·e^a + f·e^b), computed as
  logaddexp(log1p(-f) + a, log(f) + b) for a float f in (0, 1).

  Both sides finite (|a|, |b| <= Λ = `term_max`, |b - a| <= D = `gap_max`):
  with X = log(1-f) + a, Y = log f + b and shares s_X, s_Y of the result,
  s_Y·|log f| <= D + 2 (s_Y <= f·e^D/(1-f): where |log f| > D + 1 the share
  decays faster than |log f| grows) and likewise s_X·|log(1-f)|, so the
  inputs' roundings (ELEMENTARY_ULPS of each log, u of each addition) move
  the result by <= 2·lib·(D + 2) + u·(Λ + D + 2) each side; logaddexp's own
  (its difference u·|X-Y| weighted by e^-|X-Y| <= u/e, exp and log1p their
  ulps of values <= log 2, the last addition u·(Λ + 1)); second order by the
  factor 1 + 1e-6. One side -inf (`one_sided`): the value is log f + b (or
  log(1-f) + a), whose own rounding is lib·745.2 + u·(745.2 + Λ).

  Args:
    term_max: Λ, a bound on |a| and |b| at finite entries, >= 0.
    gap_max: D, a bound on |b - a| where both are finite (default 2Λ).
    one_sided: whether an entry may have one side -inf.

  Returns:
    The bound (absolute, in log), added to the inputs' own error.
  """
  lam = float(term_max)
  d = 2 * lam if gap_max is None else min(float(gap_max), 2 * lam)
  both = (2 * (2 * _LIB * (d + 2) + U * (lam + d + 2)) + U / math.e +
          2 * _LIB + U * (lam + 1))
  if not one_sided:
    return both * (1 + 1e-6)
  single = _LIB * _LOG_WEIGHT_MAX + U * (_LOG_WEIGHT_MAX + lam)
  return max(both, single) * (1 + 1e-6)


def log_binomial_error_bound(trials: int, p_low: float, p_high: float) -> float:
  """A bound on `log_binomial`(trials, p)'s error at every entry and every p
  in [p_low, p_high] (a mechanism whose p depends on its input).

  Each term of `log_binomial`'s per-entry bound, at its largest over the
  range. Along any path from the anchor, Σ|t_j| <= Σ_j |t_j| = 2·log
  C(N, ⌊N/2⌋) <= 2N·log 2, so a partial sum's error is <= 2.0001u·N +
  lib·2N·log 2, plus the grid's N·2^-(K+1) and the conversions'
  3.03u·N·log 2. L = log(p/(1-p)): |L| <= L_max at the ends; e_L <= 9.1u·|δ|
  + lib·L_max (δ = (2p-1)/(1-p), the range inside [1/4, 3/4]), else 20u +
  lib·(2Λ + L_max) + 1.01u·L_max with Λ = -log min(p, 1-p) (<= 745.2 for a
  positive float); |v_k| <= N·(log 2 + L_max), |log P(k)| <= N·Λ; the
  normaliser adds the largest e_v, 1.02·lib, lib·log(N+1) and 3u (lib =
  ELEMENTARY_ULPS·2u).

  Args:
    trials: N in [0, 2^27).
    p_low, p_high: 0 <= p_low <= p_high <= 1.

  Returns:
    The bound (absolute, in log).

  Raises:
    ValueError: an argument out of range (named).
  """
  n = validation.check_integer('trials', trials, 0, 2**27 - 1)
  validation.check_number('p_low', p_low, 0, 1)
  validation.check_number('p_high', p_high, p_low, 1)
  if n == 0:
    return 0.0
  if n == 1:   # `log_binomial`'s direct [log1p(-p), log p]
    worst = max(-math.log(p_low) if p_low > 0 else _LOG_WEIGHT_MAX,
                -math.log1p(-p_high) if p_high < 1 else _LOG_WEIGHT_MAX)
    return _LIB * min(worst, _LOG_WEIGHT_MAX) * (1 + 1e-5)
  smallest = min(p_low, 1.0 - p_high)
  big_lambda = (_LOG_WEIGHT_MAX if smallest <= math.exp(-_LOG_WEIGHT_MAX)
                else -math.log(smallest))
  big_lambda = max(big_lambda, math.log(2.0))
  ends = [q for q in (p_low, p_high) if 0 < q < 1]
  l_max = max([abs(math.log(q) - math.log1p(-q)) for q in ends] + [0.0])
  l_max = min(l_max, 2 * _LOG_WEIGHT_MAX)
  log2 = math.log(2.0)
  e_s = ((2.0001 * U * n + _LIB * 2 * n * log2) * (1 + n * 4 * U)
         + n * 2.0**-(_grid_bits(n) + 1) + 3.03 * U * n * log2)
  if 0.25 <= p_low and p_high <= 0.75:
    delta = max(abs((2 * q - 1) / (1 - q)) for q in (p_low, p_high))
    e_l = 9.1 * U * delta + _LIB * l_max
  else:
    e_l = 20 * U + _LIB * (2 * big_lambda + l_max) + 1.01 * U * l_max
  e_v = (e_s + n * e_l + 1.01 * U * n * l_max + U * n * (log2 + l_max)) * (1 + 4 * U)
  e_z = e_v + 1.02 * _LIB + _LIB * math.log(n + 1) + 3 * U + 2 * (n + 1) * math.exp(-700)
  return (e_v + e_z + U * (n * big_lambda + math.log(n + 1))) * (1 + 1e-6)


# ----------------------------------------------------------------------------
# The standard normal CDF: a named accuracy assumption (docs/privacy.md,
# "Numerics"), and what follows from it.
# ----------------------------------------------------------------------------
#: Assumed accuracy of scipy.special.ndtr (Cephes' ndtr: 0.5·erfc(-t/√2) for
#: t <= -1, 0.5 + 0.5·erf(t/√2) near 0): for -37 <= t <= 0,
#: |ndtr(t)/Φ(t) - 1| <= (NDTR_U_CONSTANT + NDTR_U_QUADRATIC·t²)·u. The t²
#: term is erfc's e^(-x²) at x = t/√2 evaluated from a rounded argument
#: (relative error x²·u of exp's argument). Cephes documents a peak relative
#: error of 3.4e-14 for ndtr on [-13, 0] (153u; the bound allows 692u there)
#: and 5.7e-14 for erfc on [0, 26.64] (the bound allows 5,700u at t = 37.7).
#: Measured against 40-digit mpmath on 12,000 points of [-38.5, 0]
#: (tests/common/exact_laws_test.py): at most 5.4u + 2.3u·t², within the
#: assumption by a factor >= 1.8 everywhere. For t > 0, ndtr(t) is 1 minus the
#: same tail, one more rounding: |ndtr(t) - Φ(t)| <= u + (same)·Φ(-t). Below
#: t = NDTR_NORMAL_FROM, Φ(t) < 1e-299 and float64 loses relative precision
#: (subnormals from 2.2e-308): there only 0 <= ndtr(t) <= NDTR_TINY is assumed.
NDTR_U_CONSTANT = 16.0
NDTR_U_QUADRATIC = 4.0
NDTR_NORMAL_FROM = -37.0
NDTR_TINY = 1e-298
#: Φ(-t) <= φ(t)·min(√(π/2), 1/t) for t >= 0 (`normal_tail_upper`).
_SQRT_HALF_PI = math.sqrt(math.pi / 2)
_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


def ndtr_relative_error(t) -> np.ndarray:
  """The assumed relative error of scipy's ndtr on its tail side (NDTR_U_*):
  (NDTR_U_CONSTANT + NDTR_U_QUADRATIC·t²)·u, for -37 <= -|t|.

  Args:
    t: arguments (either sign; the tail side -|t| is meant).

  Returns:
    The bounds, float64 (an upper bound on the formula: one extra u).
  """
  t = np.asarray(t, np.float64)
  return (NDTR_U_CONSTANT + NDTR_U_QUADRATIC * t * t) * U * (1 + 4 * U)


def normal_tail_upper(t) -> np.ndarray:
  """An upper bound on Φ(-|t|) from the Mills ratio: φ(t)·min(√(π/2), 1/|t|)
  (R(t) = Φ(-t)/φ(t) decreases from √(π/2) and is below 1/t; Gordon 1941),
  with exp's rounding (ELEMENTARY_ULPS) and the products' covered by 1e-12.

  Args:
    t: arguments.

  Returns:
    The bounds, float64, in (0, 1/2].
  """
  t = np.abs(np.asarray(t, np.float64))
  with np.errstate(divide='ignore', under='ignore'):
    phi = np.exp(-0.5 * t * t - _LOG_SQRT_2PI)
    ratio = np.minimum(_SQRT_HALF_PI, 1.0 / t)
  return np.minimum(phi * ratio * (1 + 1e-12), 0.5)


def log_add_error(value_max: float) -> float:
  """A bound on numpy's rounding of logaddexp(X, Y) = max + log1p(exp(-|X-Y|)),
  both finite, |result| <= `value_max`: the difference's u·|X-Y| weighted by
  e^-|X-Y|/(1 + e^-|X-Y|) (<= u/e), exp's lib (relative, then through log1p
  with derivative <= 1), log1p's lib·log 2, the addition u·|result|
  (lib = ELEMENTARY_ULPS·2u). The inputs' own errors pass through weighted
  by their shares (at most the larger).

  Args:
    value_max: a bound on |logaddexp(X, Y)|.

  Returns:
    The bound (absolute, in log).
  """
  return (U / math.e + _LIB * (1 + math.log(2)) + U * float(value_max)) * (1 + 1e-6)


def normal_tail_lower(t) -> np.ndarray:
  """A lower bound on Φ(-|t|): φ(t)·|t|/(1 + t²) (Gordon 1941), and
  Φ(-|t|) >= 1/2 - |t|·φ(0) near 0; exp's rounding covered by 1e-12.

  Args:
    t: arguments.

  Returns:
    The bounds, float64, in [0, 1/2].
  """
  t = np.abs(np.asarray(t, np.float64))
  with np.errstate(under='ignore'):
    phi = np.exp(-0.5 * t * t - _LOG_SQRT_2PI)
  return np.maximum(phi * t / (1 + t * t), 0.5 - t / math.sqrt(2 * math.pi)) * (1 - 1e-12)


# ----------------------------------------------------------------------------
# log Φ(t), t <= 0, with a proved error under the ndtr assumption.
# ----------------------------------------------------------------------------
#: From |t| = LOG_NDTR_SERIES_FROM on, `log_normal_cdf` sums the Mills
#: ratio's asymptotic series instead of taking log(ndtr(t)).
LOG_NDTR_SERIES_FROM = 10.0
_SERIES_TERMS = 30   # K: the series' terms; (2K-1)!!/x^(2K) <= 3e-20 at x = 10
_DOUBLE_FACTORIAL = float(math.prod(range(1, 2 * _SERIES_TERMS, 2)))  # (2K-1)!!
#: log √(2π) as a float (0.5·log(2π)), and a bound on its error: 2π's
#: rounding (u) and log's lib (<= 1.84 lib), halved.
LOG_SQRT_2PI = _LOG_SQRT_2PI
LOG_SQRT_2PI_ERROR = 0.5 * (1.01 * U + _LIB * 1.84)


def _series_error(x, x_low, value):
  """`log_normal_cdf`'s bound on its series branch at x = -t >= 10: the
  truncation (2K-1)!!/x^(2K) taken at x_low <= x (it decreases in x), every
  other term at x; `value` bounds |log Φ(-x)|."""
  x = np.asarray(x, np.float64)
  with np.errstate(under='ignore'):
    trunc = _DOUBLE_FACTORIAL * np.exp(-2 * _SERIES_TERMS * np.log(x_low)) * (1 + 1e-9)
  rho = 7.76 * U + trunc / 0.99               # S: Horner's rounding + truncation
  log_x = np.log(x) * (1 + 1e-12)
  err = (-np.log1p(-rho) + _LIB * 0.0101        # log S̃
         + _LIB * log_x                        # log x
         + U * (log_x + 0.0101)                # log S̃ - log x
         + LOG_SQRT_2PI_ERROR + U * (log_x + 0.94)   # - log √(2π)
         + U * 0.5 * x * x * (1 + 2 * U)       # x·x, halved
         + U * np.abs(value))                  # the last addition
  return err * (1 + 1e-9)


def _near_error(x, value):
  """`log_normal_cdf`'s bound on its log(ndtr) branch (0 <= x < 10):
  ndtr's assumed relative error through log, and log's own ulps."""
  rel = ndtr_relative_error(x)
  return (-np.log1p(-rel) + _LIB * np.abs(value)) * (1 + 1e-9)


def log_normal_cdf(t) -> Tuple[np.ndarray, np.ndarray]:
  """(log Φ(t), a bound on its error) for t <= 0, proved under the ndtr
  assumption (NDTR_U_*; docs/privacy.md, "Numerics").

  x = -t < LOG_NDTR_SERIES_FROM (10): log(ndtr(t)); ndtr is within
  ε = (NDTR_U_CONSTANT + NDTR_U_QUADRATIC·x²)·u relative (x < 37), so the
  log is within -log1p(-ε), plus log's lib·|value| (lib = ELEMENTARY_ULPS·2u).

  x >= 10: log Φ(-x) = -x²/2 - log √(2π) - log x + log(x·R(x)), R the Mills
  ratio. x·R(x) = ∫_0^∞ x·e^(-xs - s²/2) ds; e^(-s²/2)'s Taylor remainders
  alternate, so x·R(x) = S + r with S = Σ_{k<K} (-1)^k (2k-1)!!/x^(2k) and
  |r| <= (2K-1)!!/x^(2K) (K = 30: <= 3e-20 at x = 10; S in [0.99, 1]). S by
  Horner in y = fl(1/fl(x·x)) (2.01u): H <- 1 - c·y·H, c = 2K-3, ..., 3, 1;
  c·y <= 0.57 and H in [0.43, 1], so an error e becomes <= 0.5701e + 3.3u,
  at most 7.68u absolute (7.76u relative) in the end. The remaining steps:
  log S̃ (lib·0.0101), log x (lib·log x), the subtraction u·(log x + 0.0101),
  log √(2π) (its float's error `LOG_SQRT_2PI_ERROR`, and u·(log x + 0.94)),
  x·x (u·x²/2 after the exact halving) and the final addition (u·|value|).

  Args:
    t: arguments, finite, <= 0, |t| <= 1e150 (x·x stays finite).

  Returns:
    (values, errors), float64 arrays of t's shape: |values - log Φ(t)| <=
    errors.

  Raises:
    ValueError: an argument above 0, not finite, or below -1e150.
  """
  t = np.asarray(t, np.float64)
  if not np.all((t <= 0) & (t >= -1e150)):
    raise ValueError('`t` must be finite, in [-1e150, 0].')
  x = -t
  series = x >= LOG_NDTR_SERIES_FROM
  xs = np.where(series, x, LOG_NDTR_SERIES_FROM)
  xx = xs * xs
  y = 1.0 / xx
  s = np.ones_like(xs)
  for c in range(2 * _SERIES_TERMS - 3, 0, -2):
    s = 1.0 - (c * y) * s
  small = (np.log(s) - np.log(xs)) - _LOG_SQRT_2PI
  far = -0.5 * xx + small
  with np.errstate(divide='ignore'):
    near = np.log(special.ndtr(np.where(series, 0.0, t)))
  values = np.where(series, far, near)
  errors = np.where(series, _series_error(xs, xs, far),
                    _near_error(np.where(series, 0.0, x), near))
  return values, errors


def log_normal_cdf_error_bound(x_max: float) -> float:
  """A bound on `log_normal_cdf`'s error at every t in [-x_max, 0]: each
  branch's bound is non-decreasing in x = -t but for the series'
  truncation, taken at x = 10.

  Args:
    x_max: >= 0, at most 1e150.

  Returns:
    The bound (absolute, in log).

  Raises:
    ValueError: `x_max` out of range.
  """
  x_max = float(validation.check_number('x_max', x_max, 0, 1e150))
  x_near = min(x_max, LOG_NDTR_SERIES_FROM)
  value_near = abs(math.log(float(special.ndtr(-x_near)))) * (1 + 1e-9) + 1e-12
  out = float(_near_error(x_near, value_near))
  if x_max >= LOG_NDTR_SERIES_FROM:
    value_far = 0.5 * x_max * x_max + math.log(x_max) + 1.0
    out = max(out, float(_series_error(x_max, LOG_NDTR_SERIES_FROM, value_far)))
  return out
