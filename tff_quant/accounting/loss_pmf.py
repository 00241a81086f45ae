"""Privacy-loss pmfs on an integer grid: pessimistic rounding, proved composition.

The PLD route needs the law of the privacy loss L = log P(o)/Q(o) under P for
one round of d coordinates. We hold it as masses on the grid `interval`·k
(every loss rounded UP, which can only raise δ(ε) = E_P[(1 - e^(ε-L))_+]) plus
the mass where L = +inf. Every floating-point step raises the masses by a
bound on its rounding, so each result's δ(ε) is at least that of the exact
law of the computed pair's loss: a mass raised or a loss moved up can only
raise δ, and so does every composition and mixture of such masses.

Composition is one power-of-2 FFT over a Chernoff window of the sum
(`sum_window`, `circular_power`), its error proved by `common.laws.fft_error`;
`window_points` gives the FFT's size before anything is allocated, so a
caller can refuse a composition that would not fit instead of dying of memory.
"""

import dataclasses
import math
from typing import Optional, Tuple

import numpy as np

from tff_quant.common import exact_laws
from tff_quant.common import laws

DEFAULT_TAIL = 1e-15

_U = exact_laws.U
_LIB = 2 * exact_laws.ELEMENTARY_ULPS * exact_laws.U   # one elementary function
#: Added to bounds computed in floating point: covers the absolute rounding
#: of results in float64's subnormal range (below 2.3e-308).
_TINY = 1e-300


def bernstein_radius(span: float, variance: float, times: int,
                     tail: float = DEFAULT_TAIL) -> int:
  """a with P(|S - E S| >= a) <= tail, S a sum of `times` independent terms of
  range <= span and variance <= `variance` (Bernstein's inequality):
  a = (span/3)·l + sqrt((span/3·l)² + 2·times·variance·l), l = log(2/tail).

  An estimate for sizing (it reads a computed variance), not a proved cut:
  the cuts that move mass are `sum_window`'s.

  Args:
    span: the range of each term (>= 0, grid units).
    variance: an upper bound on each term's variance (>= 0).
    times: the number of terms, >= 1.
    tail: the two-sided tail probability, in (0, 1).

  Returns:
    The radius a, rounded up to an integer.
  """
  log_term = math.log(2.0 / tail)
  third = span / 3.0 * log_term
  return int(math.ceil(third + math.sqrt(third**2 + 2.0 * times * variance *
                                         log_term)))


def sum_window(p: np.ndarray, k_lo: int, times: int, tail: float
               ) -> Tuple[int, int]:
  """[a, b]: the index range of the `times`-fold sum of the masses p (p[i] at
  index k_lo + i) outside which at most `tail` of its mass lies on each side.

  Chernoff: P(S >= b) <= e^(T·K(λ) − λb) and P(S <= a) <= e^(T·K(−λ) + λa),
  λ > 0 on a grid, K the masses' log-MGF log Σ p_i e^(λ(k_lo + i)) raised by
  1e-9 + 1e-12|K| + 4uλ·len(p) for its rounding (the products λi, the
  pairwise sum, exp and log). Valid for any non-negative masses (Markov's
  inequality for a measure) and any λ > 0: each side's λ is the grid point
  a golden-section search over the grid finds (the grid's best where the
  edge is unimodal in λ, as the log-MGF's convexity makes it in practice;
  a worse λ only widens the window). Clamped into the support [T·k_lo,
  T·k_hi] with a <= b: where the whole finite mass^T is below `tail` the
  two cuts cross, and the window holds one point.

  Args:
    p: non-negative masses (float64), at least one positive.
    k_lo: the index of p[0].
    times: T >= 1.
    tail: the mass each side may leave out, in (0, 1).

  Returns:
    (a, b), integers, T·k_lo <= a <= b <= T·(k_lo + len(p) − 1).
  """
  i = np.arange(p.size, dtype=np.float64)
  with np.errstate(divide='ignore'):
    log_p = np.log(p)
  lo_all, hi_all = times * k_lo, times * (k_lo + p.size - 1)
  log_tau = math.log(tail)
  lams = np.geomspace(1e-6, 50.0, 60)

  def edge(sign, j):
    """(T·K(±λ_j) − log τ)/λ_j: the cut on that side is ±edge."""
    lam = lams[j]
    terms = log_p + sign * lam * i
    m = float(np.max(terms))
    k = m + math.log(float(np.sum(np.exp(terms - m))))
    k = k + 1e-9 + 1e-12 * abs(k) + 4 * _U * lam * p.size + sign * lam * k_lo
    return (times * k - log_tau) / lam

  best_hi = min(hi_all, int(math.ceil(_grid_min(
      lambda j: edge(1.0, j), lams.size))))
  best_lo = max(lo_all, int(math.floor(-_grid_min(
      lambda j: edge(-1.0, j), lams.size))))
  lo = min(max(best_lo, lo_all), hi_all)
  return lo, min(max(best_hi, lo), hi_all)


def _grid_min(f, size: int) -> float:
  """min f(j) over j in [0, size) for f unimodal on the grid, by golden-
  section search on the index (about 1.44·log2(size) + 2 calls); for any
  other f, f at some grid point (never below the true minimum)."""
  seen = {}

  def at(j):
    if j not in seen:
      seen[j] = f(j)
    return seen[j]

  a, b = 0, size - 1
  while b - a > 2:
    c = a + int(round((b - a) * 0.381966))
    d = b - int(round((b - a) * 0.381966))
    if c == d:
      d = c + 1
    if at(c) <= at(d):
      b = d
    else:
      a = c
  return min(at(j) for j in range(a, b + 1))


def window_points(p: np.ndarray, k_lo: int, times: int, tail: float) -> int:
  """The FFT size `circular_power` takes: the least power of 2 holding both
  the window [a, b] and p (no allocation beyond p's size).

  Args:
    p, k_lo, times, tail: as for `sum_window`.

  Returns:
    N, a power of 2 >= max(b − a + 1, len(p)).
  """
  return _fft_size(sum_window(p, k_lo, times, tail), p.size)


def _fft_size(window: Tuple[int, int], size: int) -> int:
  """The least power of 2 >= max(b − a + 1, size), window = (a, b)."""
  lo, hi = window
  return 1 << max(int(hi - lo).bit_length(), (size - 1).bit_length(), 1)


def circular_power(p: np.ndarray, k_lo: int, times: int, tail: float
                   ) -> Tuple[int, np.ndarray, float]:
  """The `times`-fold convolution of the masses p on the window of
  `sum_window`, by one FFT of size N = `window_points` (binary powering,
  `laws.complex_power`), with a proved bound on its error.

  Circularly, the mass outside the window [a, a + N) lands inside it: at a
  larger index for the mass below a (S + jN, j >= 1), at a smaller one for
  the mass above (at most `tail` beyond b). So value[s] is the exact
  convolution's entry at s plus non-negative aliases, within `error` of the
  computed one (`laws.fft_error`, a 2-norm bound, so per entry too); a
  caller that needs every loss moved up only must add `tail` of mass at the
  top (+∞) for what landed lower.

  Args:
    p, k_lo, times, tail: as for `sum_window`.

  Returns:
    (a, values, error): values[j] for index a + j, j < N (computed), and the
    bound on the 2-norm of values − (exact circular convolution).
  """
  window = sum_window(p, k_lo, times, tail)
  lo, n_fft = window[0], _fft_size(window, p.size)
  circular = np.fft.irfft(laws.complex_power(np.fft.rfft(p, n_fft), times),
                          n_fft)
  error = laws.fft_error([(p, times)], [(0.0, 0, float(np.linalg.norm(p)),
                                         math.fsum(p))], n_fft, circular)
  s = np.arange(lo, lo + n_fft, dtype=np.int64)
  return lo, circular[(s - times * k_lo) % n_fft], error


def raised_power_of_one_minus(mass: float, times: int) -> float:
  """An upper bound on 1 − (1 − mass)^times (the chance that one of `times`
  independent copies has its loss at +∞), rounded up: log1p, the product,
  expm1 (8·lib) and 1e-300 for the subnormal range; at most 1.

  Args:
    mass: in [0, 1].
    times: >= 1.

  Returns:
    The bound, in [0, 1].
  """
  if mass >= 1:
    return 1.0
  return min(-math.expm1(times * math.log1p(-mass)) * (1 + 8 * _LIB) + _TINY,
             1.0)


@dataclasses.dataclass
class LossPmf:
  """P(L = (lower + i)·interval) <= probs[i]; P(L = +inf) <= inf_mass.

  Upper bounds on the masses of a privacy loss whose every value has been
  moved up to the grid: δ(ε) read from them bounds the exact δ(ε).

  Attributes:
    lower: the grid index of probs[0].
    probs: float64 non-negative masses of the finite grid points.
    inf_mass: the mass at loss +inf, in [0, 1].
    interval: the grid spacing in nats, > 0.
  """
  lower: int
  probs: np.ndarray
  inf_mass: float
  interval: float

  @classmethod
  def from_log_pmfs(cls, log_p: np.ndarray, log_q: np.ndarray,
                    interval: float, log_p_error: Optional[np.ndarray] = None,
                    log_q_error: Optional[np.ndarray] = None,
                    log_p_upper: Optional[np.ndarray] = None) -> 'LossPmf':
    """The loss of P vs Q (log-pmfs on one support), rounded up to the grid.

    Where the log-pmfs carry proved errors (|log_p − log P| <= log_p_error,
    likewise Q, e.g. `laws.sum_log_pmf_with_error`), each point's mass is
    read at log_p + log_p_error and its loss at (log_p + log_p_error) −
    (log_q − log_q_error); where either error is not finite (or log_p is
    NaN: unresolved), the mass, at most e^(log_p_upper), goes to +∞.
    The rounding is carried too: each loss (a − b)/interval, a and b the
    two log-values each rounded once, is within 1.01u(|a| + |b|)/interval +
    2.01u of its size, and is raised by twice that before the ceiling; each mass e^(·) (exp:
    lib) is summed into its grid point (u per addition, at most K terms), so
    every point and the +∞ mass are raised by (1 + lib)(1 + (K + 2)u), K the
    support's size.

    Args:
      log_p: log-pmf of P (-inf where P is 0, exactly).
      log_q: log-pmf of Q on the same support (-inf where Q is 0, exactly).
      interval: the grid spacing in nats, > 0.
      log_p_error, log_q_error: per-entry bounds on the log-pmfs' errors
        (None: exact).
      log_p_upper: a proved upper bound on log P where log_p_error is not
        finite (required where it is not).

    Returns:
      The `LossPmf` of log P(o)/Q(o) under o ~ P, each loss rounded up to a
      multiple of `interval`; the mass of P where Q = 0 (or where the errors
      leave the loss unbounded) is `inf_mass`.

    Raises:
      ValueError: an unbounded entry of P without `log_p_upper`, or a NaN
        log_q where log_p is finite.
    """
    zeros = np.zeros(log_p.shape)
    ep = zeros if log_p_error is None else np.asarray(log_p_error, np.float64)
    eq = zeros if log_q_error is None else np.asarray(log_q_error, np.float64)
    live = ~(log_p == -np.inf)   # NaN (unresolved) included
    bounded = live & np.isfinite(log_p) & np.isfinite(ep)
    unbounded = live & ~bounded
    with np.errstate(invalid='ignore'):
      unbounded |= bounded & ~np.isfinite(eq) & (log_q != -np.inf)
    bounded &= ~unbounded
    if unbounded.any() and (log_p_upper is None or np.any(
        np.isnan(log_p_upper[unbounded & ~np.isfinite(ep)]))):
      raise ValueError('`log_p_upper` is needed where `log_p_error` is not '
                       'finite (an entry with no proved error).')
    if np.any(np.isnan(log_q[bounded])):
      raise ValueError('`log_q` is NaN where `log_p` is finite: an unresolved '
                       'entry of Q has no proved lower bound.')
    top = np.where(np.isfinite(ep), log_p + ep, np.inf)
    if log_p_upper is not None:
      top = np.where(unbounded & ~np.isfinite(ep), log_p_upper, top)
    # The sum log p + e_p (and any given value) raised by its rounding.
    with np.errstate(invalid='ignore'):
      top = top + 2 * _U * np.abs(top)
    raise_by = (1 + _LIB) * (1 + (log_p.size + 2) * _U)
    to_inf = unbounded | (bounded & (log_q == -np.inf))
    inf_mass = (float(np.exp(top[to_inf]).sum()) * raise_by +
                _TINY * bool(np.any(to_inf)))
    inf_mass = min(inf_mass, 1.0) if not math.isnan(inf_mass) else 1.0
    ok = bounded & ~to_inf
    a, b = top[ok], log_q[ok] - eq[ok]
    ratio = (a - b) / interval
    slack = 4 * _U * np.abs(ratio) + 2.02 * _U * (np.abs(a) + np.abs(b)) / interval
    losses = np.ceil(ratio + slack).astype(np.int64)
    if not losses.size:
      return cls(0, np.zeros(1), inf_mass, interval)
    lower = int(losses.min())
    # Each point also gets 1e-300 for masses that underflow or are
    # subnormal (their relative error unbounded): at most K·2.3e-308 each.
    probs = (np.bincount(losses - lower, weights=np.exp(top[ok])) * raise_by
             + _TINY * (np.bincount(losses - lower) > 0))
    return cls(lower, probs, inf_mass, interval)

  @property
  def span(self) -> int:
    """Grid points of the finite part minus 1 (its range, in grid units)."""
    return len(self.probs) - 1

  def mean(self) -> float:
    """Mean of the finite part, in grid units (absolute: lower included).

    Returns:
      The mean grid index of the finite part normalised to mass 1 (`lower`
      where it has no mass).
    """
    mass = self.probs.sum()
    k = np.arange(len(self.probs))
    return self.lower + (float(np.dot(k, self.probs) / mass) if mass > 0 else 0.0)

  def variance(self) -> float:
    """Variance of the finite part, in grid units².

    Returns:
      The variance of the finite part normalised to mass 1 (0 where it has
      no mass).
    """
    mass = self.probs.sum()
    if mass <= 0:
      return 0.0
    k = np.arange(len(self.probs))
    mean = np.dot(k, self.probs) / mass
    return float(np.dot((k - mean)**2, self.probs) / mass)

  def composed_points(self, times: int, tail: float = DEFAULT_TAIL) -> int:
    """The grid points `compose(times, tail)` allocates (its FFT size).

    Args:
      times: the number of compositions, >= 1.
      tail: as for `compose`.

    Returns:
      An integer (`window_points`; the pmf's own length at times = 1).
    """
    if times == 1 or not np.any(self.probs > 0):
      return len(self.probs)
    return window_points(self.probs, self.lower, times, tail)

  def round_then_rounds_points(self, dim: int, gamma: float, rounds: int,
                               tail: float = DEFAULT_TAIL) -> int:
    """An estimate of the grid of `dim`-fold composition, mixed with loss 0
    at weight 1-γ, then composed `rounds` times (Bernstein's radius with
    the pmf's variance and span), known before computing either.

    Args:
      dim: coordinates composed first, >= 1.
      gamma: the sampling rate γ in (0, 1] (`mix_with_zero`).
      rounds: compositions of the mixture, >= 1.
      tail: the tail mass each composition moves, in (0, 1).

    Returns:
      An integer estimate of the final grid's points.
    """
    a = bernstein_radius(self.span, self.variance(), dim, tail) + self.span
    centre = dim * self.mean()
    lo, hi = min(centre - a, 0.0), max(centre + a, 0.0)
    var_d = dim * self.variance()
    var_mix = gamma * (var_d + centre**2) - (gamma * centre)**2
    span = int(math.ceil(hi - lo))
    return min(rounds * span + 1,
               2 * bernstein_radius(span, var_mix, rounds, tail) + span + 1)

  def compose(self, times: int, tail: float = DEFAULT_TAIL) -> 'LossPmf':
    """Upper bounds on the loss masses of `times` independent copies.

    One FFT over `sum_window`'s window (`circular_power`): every entry is
    raised to max(value, 0) + its proved error (the 2-norm bound holds per
    entry) and by 4u for that sum; the mass above the window (at most
    `tail`), which the circular sum moved down, is added at +∞, with the
    copies' own +∞ mass (`raised_power_of_one_minus`) and the mass below
    the window (at most `tail`, for the aliases zeroed below).

    Args:
      times: the number of copies, >= 1.
      tail: the mass each side of the window may leave out, in (0, 1).

    Entries outside the sum's range [T·lower, T·(lower + span)] hold only
    aliases of the mass below the window (at most `tail`, added at +∞
    instead) and are zeroed, not raised. Where the finite part's T-th power
    is below 1e-290 (the FFT's bound would underflow) it all goes to +∞.

    Returns:
      A `LossPmf` whose δ(ε) is at least that of the exact composition of
      `times` copies of the law these masses bound (a sub-probability: the
      finite and +∞ masses of a law total at most 1).
    """
    if times == 1:
      return self
    inf_mass = raised_power_of_one_minus(self.inf_mass, times)
    if not np.any(self.probs > 0):
      return LossPmf(times * self.lower, np.zeros(1), inf_mass, self.interval)
    log_total = times * math.log(math.fsum(self.probs) *
                                 (1 + (self.probs.size + 4) * _U))
    if log_total < math.log(1e-290):
      return LossPmf(times * self.lower, np.zeros(1),
                     min(inf_mass + math.exp(log_total) * (1 + _LIB) + _TINY,
                         1.0), self.interval)
    lo, values, error = circular_power(self.probs, self.lower, times, tail)
    probs = (np.maximum(values, 0.0) + error) * (1 + 4 * _U)
    index = lo + np.arange(probs.size)
    probs[(index < times * self.lower) |
          (index > times * (self.lower + self.span))] = 0.0
    return LossPmf(lo, probs, min(inf_mass + 2 * tail * (1 + 4 * _U), 1.0),
                   self.interval)

  def mix_with_zero(self, gamma: float) -> 'LossPmf':
    """With probability 1-γ the target is not sampled: loss 0 (as if revealed).

    The products γ·p and 1 − γ are raised by 2u each, and every nonzero
    entry by 1e-300 (a product in the subnormal range).

    Args:
      gamma: the sampling rate γ in [0, 1].

    Returns:
      The `LossPmf` of the mixture: γ·self + (1-γ)·(loss 0).
    """
    lower = min(self.lower, 0)
    top = max(self.lower + self.span, 0)
    probs = np.zeros(top - lower + 1)
    up = 1 + 2 * _U
    where = slice(self.lower - lower, self.lower - lower + len(self.probs))
    probs[where] = gamma * self.probs * up
    live = np.zeros(probs.size, bool)
    live[where] = (self.probs > 0) & (gamma > 0)
    probs[-lower] += (1.0 - gamma) * up
    probs = probs * up + _TINY * live
    inf_mass = (gamma * self.inf_mass * up +
                _TINY * (self.inf_mass > 0 and gamma > 0))
    return LossPmf(lower, probs, min(inf_mass, 1.0), self.interval)

  def as_dict(self):
    """{grid index: mass} of the nonzero finite part.

    Returns:
      A dict of int grid index (`lower` included) to float mass.
    """
    nz = np.nonzero(self.probs > 0)[0]
    return dict(zip((nz + self.lower).tolist(), self.probs[nz].tolist()))
