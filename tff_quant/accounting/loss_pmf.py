"""Privacy-loss pmfs on an integer grid: pessimistic rounding, composition, cost.

The PLD route needs the law of the privacy loss L = log P(o)/Q(o) under P for
one round of d coordinates. We hold it as a pmf on the grid `interval`·k (every
loss rounded UP, which can only raise δ(ε) = E_P[(1 - e^(ε-L))_+]) plus the
mass where L = +inf. Composition is FFT convolution by repeated squaring; tail
mass below `tail` is moved pessimistically (lower tail up to the first kept
point, upper tail to +inf), so every result stays an upper bound.

Before any allocation, `composed_points` bounds the grid a composition needs
(Bernstein's inequality with the pmf's exact variance and span), so a caller
can refuse a composition that would not fit instead of dying of memory.
"""

import dataclasses
import math

import numpy as np
from scipy import signal

DEFAULT_TAIL = 1e-15


def bernstein_radius(span: float, variance: float, times: int,
                     tail: float = DEFAULT_TAIL) -> int:
  """a with P(|S - E S| >= a) <= tail, S a sum of `times` independent terms of
  range <= span and variance <= `variance` (Bernstein's inequality):
  a = (span/3)·l + sqrt((span/3·l)² + 2·times·variance·l), l = log(2/tail).

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


@dataclasses.dataclass
class LossPmf:
  """P(L = (lower + i)·interval) = probs[i]; P(L = +inf) = inf_mass.

  Attributes:
    lower: the grid index of probs[0].
    probs: float64 probabilities of the finite grid points.
    inf_mass: P(L = +inf), in [0, 1].
    interval: the grid spacing in nats, > 0.
  """
  lower: int
  probs: np.ndarray
  inf_mass: float
  interval: float

  @classmethod
  def from_log_pmfs(cls, log_p: np.ndarray, log_q: np.ndarray,
                    interval: float) -> 'LossPmf':
    """The loss of P vs Q (log-pmfs on one support), rounded up to the grid.

    Args:
      log_p: log-pmf of P (-inf where P is 0).
      log_q: log-pmf of Q on the same support.
      interval: the grid spacing in nats, > 0.

    Returns:
      The `LossPmf` of log P(o)/Q(o) under o ~ P, each loss rounded up to a
      multiple of `interval`; the mass of P where Q = 0 is `inf_mass`.
    """
    pos = np.isfinite(log_p)
    inf_mass = float(np.exp(log_p[pos & ~np.isfinite(log_q)]).sum())
    ok = pos & np.isfinite(log_q)
    losses = np.ceil((log_p[ok] - log_q[ok]) / interval).astype(np.int64)
    lower = int(losses.min())
    probs = np.bincount(losses - lower, weights=np.exp(log_p[ok]))
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
    """Upper bound on the grid points of `times`-fold composition, tails cut at `tail`.

    Args:
      times: the number of compositions, >= 1.
      tail: the tail mass `compose` moves, in (0, 1).

    Returns:
      An integer bound (Bernstein's inequality, `bernstein_radius`).
    """
    return min(times * self.span + 1,
               2 * bernstein_radius(self.span, self.variance(), times, tail)
               + self.span + 1)

  def round_then_rounds_points(self, dim: int, gamma: float, rounds: int,
                               tail: float = DEFAULT_TAIL) -> int:
    """Upper bound on the grid of `dim`-fold composition, mixed with loss 0 at
    weight 1-γ, then composed `rounds` times: known before computing either.

    Args:
      dim: coordinates composed first, >= 1.
      gamma: the sampling rate γ in (0, 1] (`mix_with_zero`).
      rounds: compositions of the mixture, >= 1.
      tail: the tail mass each composition moves, in (0, 1).

    Returns:
      An integer bound on the final grid's points.
    """
    a = bernstein_radius(self.span, self.variance(), dim, tail) + self.span
    centre = dim * self.mean()
    lo, hi = min(centre - a, 0.0), max(centre + a, 0.0)
    var_d = dim * self.variance()
    var_mix = gamma * (var_d + centre**2) - (gamma * centre)**2
    span = int(math.ceil(hi - lo))
    return min(rounds * span + 1,
               2 * bernstein_radius(span, var_mix, rounds, tail) + span + 1)

  def _truncate(self, tail: float) -> 'LossPmf':
    probs = np.clip(self.probs, 0.0, None)   # FFT round-off can go below 0
    cum = np.cumsum(probs)
    total = cum[-1]
    if total <= tail:   # (almost) all mass at +inf
      return LossPmf(self.lower, np.zeros(1), self.inf_mass + total, self.interval)
    lo = int(np.searchsorted(cum, tail / 2, side='right'))
    hi = int(np.searchsorted(cum, total - tail / 2, side='left'))
    lo, hi = min(lo, hi), max(lo, hi)
    kept = probs[lo:hi + 1].copy()
    kept[0] += cum[lo - 1] if lo > 0 else 0.0      # lower tail: loss raised
    upper = total - cum[hi]                          # upper tail: to +inf
    return LossPmf(self.lower + lo, kept, self.inf_mass + upper, self.interval)

  def _convolve(self, other: 'LossPmf', tail: float) -> 'LossPmf':
    probs = signal.fftconvolve(self.probs, other.probs)
    inf_mass = 1.0 - (1.0 - self.inf_mass) * (1.0 - other.inf_mass)
    return LossPmf(self.lower + other.lower, probs, inf_mass,
                   self.interval)._truncate(tail)

  def compose(self, times: int, tail: float = DEFAULT_TAIL) -> 'LossPmf':
    """The loss pmf of `times` independent copies (repeated squaring).

    Args:
      times: the number of copies, >= 1.
      tail: mass below which each tail is moved pessimistically (the lower
        tail up to the first kept point, the upper tail to +inf).

    Returns:
      A `LossPmf` whose δ(ε) is at least that of the exact composition.
    """
    result = None
    base = self._truncate(tail)
    while times:
      if times & 1:
        result = base if result is None else result._convolve(base, tail)
      times >>= 1
      if times:
        base = base._convolve(base, tail)
    return result

  def mix_with_zero(self, gamma: float) -> 'LossPmf':
    """With probability 1-γ the target is not sampled: loss 0 (as if revealed).

    Args:
      gamma: the sampling rate γ in [0, 1].

    Returns:
      The `LossPmf` of the mixture: γ·self + (1-γ)·(loss 0).
    """
    lower = min(self.lower, 0)
    top = max(self.lower + self.span, 0)
    probs = np.zeros(top - lower + 1)
    probs[self.lower - lower:self.lower - lower + len(self.probs)] = gamma * self.probs
    probs[-lower] += 1.0 - gamma
    return LossPmf(lower, probs, gamma * self.inf_mass, self.interval)

  def as_dict(self):
    """{grid index: probability} of the nonzero finite part.

    Returns:
      A dict of int grid index (`lower` included) to float probability.
    """
    nz = np.nonzero(self.probs > 0)[0]
    return dict(zip((nz + self.lower).tolist(), self.probs[nz].tolist()))
