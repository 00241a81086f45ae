"""Randomized Quantization Mechanism (RQM), Youn et al., Alg. 2 (paper 002).

Levels B(i) = -X + 2iX/(m-1), X = c + Delta. Interior levels are kept independently
with probability q (endpoints always); x is randomly rounded between the nearest kept
level below and above it.

Departures from the paper, each derived from the sampler and checked by Monte Carlo
(tests/mechanisms/rqm_test.py):
* Sampling is O(d): the nearest kept level below x is j - G and above it j+1+G',
  G, G' ~ Geometric(q) independent, clamped at the (always kept) endpoints. This has
  exactly the law of Alg. 2's keep/drop masks without drawing m masks per coordinate.
* `log_pmf` is computed from the same two independent laws (lower kept level, upper
  kept level) and their rounding weights, in log space; it agrees with Lemma 5.1.
  Lemma 5.1's inner sums are truncated Lerch sums; a backward recurrence over the
  distance to the other side evaluates them for all levels in O(m) (eq. 5.1 as
  written is O(m^2)).
* Thm 5.2's bound is reported separately (accounting.bounds.rqm_theorem_5_2); the
  exact D-infinity is computed from this pmf.
"""

import math

import numpy as np
from scipy import signal

from tff_quant.common import validation
from tff_quant.mechanisms import base

tf = base.tf


class RQM(base.Mechanism):
  """RQM(clip=c, delta=Δ, num_levels=m, q=q)."""

  name = 'rqm'
  unbiased = True
  piecewise_affine = True   # rounding between kept levels is affine in x
  TUNABLES = (
      base.levels_tunable(16, 'm'),
      base.Tunable('q', 0.42, 0, 1, low_open=True, high_open=True,
                   more_private='lower', doc='keep probability of inner levels'),
      base.Tunable('delta_ratio', 1.0, 0, None, low_open=True,
                   more_private='higher', doc='Δ / c∞ (levels span ±(c∞ + Δ))',
                   # Up to 2048: RQM's noise scales with Δ, and at d = 1.2M
                   # over 2,000 rounds ε = 10 needs Δ = 128-256c.
                   grid=tuple(2.0**i for i in range(-2, 12))),
  )
  CALIBRATED = ('delta_ratio', 'q')

  def __init__(self, clip: float, delta: float, num_levels: int, q: float):
    self.clip = float(validation.check_positive('clip', clip))
    self.delta = float(validation.check_positive('delta', delta))
    self.m = self.tunable('num_levels').check(num_levels)
    self.q = float(self.tunable('q').check(q))
    self.x_max = self.clip + self.delta

  @classmethod
  def for_coordinate_bound(cls, c_inf, **params):
    p = cls.complete_params(params)
    return cls(c_inf, p['delta_ratio'] * c_inf, p['num_levels'], p['q'])

  def params(self):
    return dict(clip=self.clip, delta=self.delta, num_levels=self.m, q=self.q)

  @property
  def num_levels(self):
    return self.m

  @property
  def input_bound(self):
    return self.clip

  @property
  def level_offset(self):
    return -self.x_max

  @property
  def level_step(self):
    return 2.0 * self.x_max / (self.m - 1)

  def _bin(self, x: float) -> int:
    """j with x in [B(j), B(j+1)), j in [0, m-2]."""
    j = math.floor((x + self.x_max) / self.level_step)
    return min(max(j, 0), self.m - 2)

  def log_pmf(self, x):
    """log P(Q(x) = i), i = 0..m-1: Lemma 5.1 (eq. 5.1) of paper 002, in O(m).

    With h the level step, x in [B(j), B(j+1)), L = j - G the nearest kept level
    below x and U = j + 1 + G' the nearest above (G, G' independent, `_encode`):
      P(Q(x) = i) = P(L = i) · E[(B(U) - x) / (B(U) - B(i))],    i <= j,
      P(Q(x) = u) = P(U = u) · E[(x - B(L)) / (B(u) - B(L))],    u >= j + 1.
    Each expectation is a truncated Lerch-type sum E[(G + s)/(G + a)] over the
    other side's gap G, with a = j + 1 - i (resp. u - j) and s = (B(j+1) - x)/h
    (resp. (x - B(j))/h); `_log_rounding_sums` evaluates it for every a at once.

    Args:
      x: the input; clipped to [-c, c] (`clip_input`).

    Returns:
      np.ndarray [m]: log P(Q(x) = i), float64, finite for every i (entries
      below 1e-308 stay exact in log space).
    """
    x = self.clip_input(x)
    m, q = self.m, self.q
    b = self.levels
    h = self.level_step
    j = self._bin(x)
    lq, l1q = math.log(q), math.log1p(-q)
    s_low = min(max((x - b[j]) / h, 0.0), 1.0)       # (x - B(j)) / h
    s_up = min(max((b[j + 1] - x) / h, 0.0), 1.0)    # (B(j+1) - x) / h
    out = np.empty(m)
    # Lower side i = j - g, g = 0..j: P(L = i) = q(1-q)^g, (1-q)^j at i = 0;
    # the upper gap G' has its interior at k <= m - 3 - j, its endpoint at m - 2 - j.
    g = np.arange(j + 1)
    log_low = lq + g * l1q
    log_low[j] = j * l1q
    out[j::-1] = log_low + _log_rounding_sums(q, m - 3 - j, s_up, j + 1)
    # Upper side u = j + 1 + g: P(U = u) = q(1-q)^g, (1-q)^(m-2-j) at u = m - 1;
    # the lower gap G has its interior at k <= j - 1, its endpoint at j.
    g = np.arange(m - 1 - j)
    log_up = lq + g * l1q
    log_up[-1] = (m - 2 - j) * l1q
    out[j + 1:] = log_up + _log_rounding_sums(q, j - 1, s_low, m - 1 - j)
    return out

  def _encode(self, x, seed):
    """Rounds x between the nearest kept levels below and above it.

    Inside the support: low = max(j - G, 0) and up = min(j + 1 + G', m - 1)
    with j clamped to [0, m - 2], and the level is low or up: in [0, m - 1]
    for every input (the pmf gives every level positive mass). t = (x + X)/h
    is `_bin`'s (float64, on the float64 input `sanitize` clipped), so the
    law at x >= c is the pmf's at c (at Δ = 1e-7c, 2^16 levels, the float32
    input float32(c) > c gave the top level 0.99727 against the pmf's
    0.99773 at c); the gaps are float32 geometrics, cast.
    """
    s_low, s_up, s_round = tf.unstack(base.split_seed(seed, 3))
    x = tf.cast(x, tf.float64)
    shape = tf.shape(x)
    step = self.level_step
    t = (x + self.x_max) / step
    j = tf.clip_by_value(tf.floor(t), 0.0, self.m - 2.0)
    gap = lambda s: tf.cast(base.geometric(shape, s, self.q, tf.float32),
                            tf.float64)
    low = tf.maximum(j - gap(s_low), 0.0)
    up = tf.minimum(j + 1.0 + gap(s_up), self.m - 1.0)
    p_up = (t - low) / (up - low)
    go_up = base.uniform(shape, s_round, tf.float64) < p_up
    return tf.where(go_up, up, low)


def _log_rounding_sums(q: float, last: int, s: float, n: int) -> np.ndarray:
  """log S(a), a = 1..n: the rounding weight of one side of RQM, in O(n + last).

  S(a) = E[(G + s) / (G + a)] for the gap G of the kept level on the other side
  of x: P(G = k) = q(1-q)^k for k = 0..K (K = `last`; kept interior levels) and
  P(G = K+1) = (1-q)^(K+1) (the always-kept endpoint); see `RQM.log_pmf`. With
  r = 1 - q, A(a) = Σ_{k=0..K} r^k / (k + a) and B(a) = Σ_{k=0..K} r^k (k + s)/(k + a)
  (truncated Lerch sums), S(a) = q B(a) + r^(K+1) (K+1+s)/(K+1+a). Shifting k by
  one gives the backward recurrence in a (from a = n down to 1):
    A(a) = 1/a + r A(a+1) - r^(K+1) / (K+a+1),
    B(a) = s/a + r (B(a+1) + A(a+1)) - r^(K+1) (K+1+s) / (K+a+1),
  started from A(n), B(n) summed directly. Every term it adds is positive or
  a term of the sum it is taken from, so at most a few times B(a) (resp. A(a))
  for K >= 1; the recurrence multiplies carried errors by r <= 1 and A, B
  decrease in a, so relative errors grow at most linearly in the steps
  (against the pair-table sum: < 1e-12 in log up to 300 levels, 1.4e-13 at
  65,536). Writing B = Σ r^k - (a - s) A instead would cancel catastrophically
  for s ≪ 1. For K = 0, B(a) = s/a exactly. Only r^k may underflow, where it
  is negligible in A and B, and in the endpoint term, which stays in log space.

  Args:
    q: the keep probability, in (0, 1).
    last: K, the largest interior gap; -1 when the endpoint is the only level
      on that side (then G = 0).
    s: the distance, in level steps, from x to the level next to it on the side
      of G's origin, in [0, 1].
    n: the number of values of a.

  Returns:
    np.ndarray [n]: log S(1), ..., log S(n) (-inf where S is 0: s = 0 and
    no interior level).
  """
  a = np.arange(1, n + 1, dtype=np.float64)
  big_k = last
  with np.errstate(divide='ignore'):
    log_end = (big_k + 1) * math.log1p(-q) + np.log((big_k + 1 + s) /
                                                     (big_k + 1 + a))
  if big_k < 0:
    return log_end
  if big_k == 0:
    inner = s / a
  else:
    r = 1.0 - q
    k = np.arange(big_k + 1, dtype=np.float64)
    r_k = np.exp(k * math.log1p(-q))
    r_end = r_k[-1] * r                                   # r^(K+1), may be 0
    a_start = float(np.sum(r_k / (k + n)))
    b_start = float(np.sum(r_k * (k + s) / (k + n)))
    down = a[::-1]                                        # n, n-1, ..., 1
    # A(a) - r A(a+1) for a = n-1..1, then the first-order recurrence y = g + r y.
    drive_a = np.concatenate([[a_start],
                              1.0 / down[1:] - r_end / (big_k + 1 + down[1:])])
    sums_a = signal.lfilter([1.0], [1.0, -r], drive_a)     # A(n), ..., A(1)
    drive_b = np.concatenate([[b_start], s / down[1:] + (
        r * sums_a[:-1] - r_end * (big_k + 1 + s) / (big_k + 1 + down[1:]))])
    inner = signal.lfilter([1.0], [1.0, -r], drive_b)[::-1]   # B(1), ..., B(n)
  with np.errstate(divide='ignore'):
    return np.logaddexp(math.log(q) + np.log(inner), log_end)
