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
* Thm 5.2's bound is reported separately (accounting.bounds.rqm_theorem_5_2); the
  exact D-infinity is computed from this pmf.
"""

import math

import numpy as np
from scipy import special

from tff_quant.common import validation
from tff_quant.mechanisms import base

tf = base.tf

_BLOCK = 2**21   # entries per block of the (lower, upper) level pair table


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
    x = self.clip_input(x)
    m, q = self.m, self.q
    j = self._bin(x)
    lq, l1q = math.log(q), math.log1p(-q)
    idx = np.arange(m)
    # Law of the nearest kept level at or below j (index i <= j).
    log_low = np.full(m, -np.inf)
    low = idx[:j + 1]
    log_low[:j + 1] = lq + (j - low) * l1q
    log_low[0] = j * l1q  # endpoint always kept: absorbs P(G >= j)
    # Law of the nearest kept level at or above j+1.
    log_up = np.full(m, -np.inf)
    up = idx[j + 1:]
    log_up[j + 1:] = lq + (up - j - 1) * l1q
    log_up[m - 1] = (m - 2 - j) * l1q
    # Pairs whose other end lies more than `near` kept-level steps away carry
    # < 2^-80 of any entry's mass (see `_near_levels`): exact in float64, O(m·near).
    near = _near_levels(q, m)
    ups = np.union1d(idx[j + 1:j + 2 + near], [m - 1])
    lows = np.union1d(idx[max(0, j - near):j + 1], [0])
    out = np.empty(m)
    out[:j + 1] = self._landing(idx[:j + 1], ups, x, log_low, log_up, True)
    out[j + 1:] = self._landing(lows, idx[j + 1:], x, log_low, log_up, False)
    return out

  def pmf_operations(self) -> float:
    """log_pmf sums each level over the kept levels within `_near_levels`
    of the other side: m·(near + 2) terms (65,536 levels at q = 1e-4:
    4.3e9, 17 s)."""
    return float(self.m) * (_near_levels(self.q, self.m) + 2)

  def _landing(self, lows, ups, x, log_low, log_up, on_low):
    """log Σ over the other end of P(lower kept = i, upper kept = u) · P(x rounds
    to the end asked for), for every i in `lows` (on_low) or u in `ups`, in blocks
    of _BLOCK pairs so memory stays bounded at any m."""
    b = self.levels
    own, other = (lows, ups) if on_low else (ups, lows)
    out = np.empty(own.size)
    step = max(1, _BLOCK // other.size)
    for start in range(0, own.size, step):
      block = own[start:start + step][:, None]
      lo, up = (block, other[None, :]) if on_low else (other[None, :], block)
      with np.errstate(divide='ignore'):
        log_w = np.log(np.maximum(b[up] - x if on_low else x - b[lo], 0.0) /
                       (b[up] - b[lo]))
      out[start:start + step] = special.logsumexp(
          log_low[lo] + log_up[up] + log_w, axis=1)
    return out

  def _encode(self, x, seed):
    s_low, s_up, s_round = tf.unstack(base.split_seed(seed, 3))
    shape = tf.shape(x)
    step = self.level_step
    t = (x + self.x_max) / step
    j = tf.clip_by_value(tf.floor(t), 0.0, self.m - 2.0)
    low = tf.maximum(j - base.geometric(shape, s_low, self.q, x.dtype), 0.0)
    up = tf.minimum(j + 1.0 + base.geometric(shape, s_up, self.q, x.dtype),
                    self.m - 1.0)
    p_up = (t - low) / (up - low)
    go_up = base.uniform(shape, s_round, x.dtype) < p_up
    return tf.where(go_up, up, low)


def _near_levels(q: float, m: int) -> int:
  """Steps a beyond which the geometric gap law's mass (1-q)^a is < 2^-80·q/m.

  Every entry of the pmf is at least q(1-q)/m times its end's probability (the
  kept level one step further out, at distance <= m, rounds to it with weight
  >= 1/m), so pairs beyond this contribute < 2^-80 relative: below float64's
  resolution. The always-kept endpoints are paired exactly.
  """
  need = 80 * math.log(2) + math.log(m / q)
  return int(min(m, math.ceil(need / -math.log1p(-q))))
