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
                   grid=(0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)),
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
    b = self.levels
    out = np.full(m, -np.inf)
    up_k = idx[j + 1:]
    col = np.full(up_k.size, -np.inf)
    # Blocks of lower levels: O(m²) time but O(_BLOCK) memory at any m.
    step = max(1, _BLOCK // max(1, up_k.size))
    for start in range(0, j + 1, step):
      lo_i = idx[start:min(j + 1, start + step)][:, None]
      width = b[up_k][None, :] - b[lo_i]
      with np.errstate(divide='ignore'):
        log_w_down = np.log(np.maximum(b[up_k][None, :] - x, 0.0) / width)
        log_w_up = np.log(np.maximum(x - b[lo_i], 0.0) / width)
      log_pair = log_low[lo_i] + log_up[up_k][None, :]
      out[lo_i[:, 0]] = special.logsumexp(log_pair + log_w_down, axis=1)
      col = np.logaddexp(col, special.logsumexp(log_pair + log_w_up, axis=0))
    out[j + 1:] = col
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
