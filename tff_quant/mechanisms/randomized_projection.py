"""Randomized projection of RQP-SGD (paper 004, Alg. 1-2), with the DP-SGD noise.

y = x + N(0, σ²) (σ = the per-step noise std on a coordinate, σ_l = ησ/m in the
paper), clipped to [-M, M]; Q* = the nearest of the L = 2^b levels
Q_i = -M + 2Mi/(L-1); output Q* with probability q, otherwise one of the other
L-1 levels uniformly.

P(i) = A_i q + (1 - A_i)(1-q)/(L-1), A_i = P(nearest level of clip(y) is i).

Departure from the paper (derived from the sampler, checked by Monte Carlo): the
end cells absorb the clipped tails, A_0 = Φ((Q_0 + h - x)/σ) and
A_{L-1} = 1 - Φ((Q_{L-1} - h - x)/σ) (h = M/(L-1)); the printed pmf uses the
interior-cell formula Φ(Q_i^+) - Φ(Q_i^-) for every level, which does not sum to
one. Every level keeps probability >= min(q, (1-q)/(L-1)) > 0, so D∞ is finite.
Not unbiased (projection); `input_bound` is the range of the pre-noise value
(e.g. M + ηC for w_t - η·grad with w_t in [-M, M]).

Departures for the aggregation factory (registry), each checked by Monte
Carlo (tests/mechanisms/randomized_projection_test.py):
* The nearest level's probability q is free in the paper; calibration
  leaves it where it is given, and the registry default depends on the bits
  (`default_q`): 0.9 below 8 bits, 0.99 from 8 bits, the better of the two
  at the FL table's setting (docs/mechanisms.md).
* The levels' range M is a tunable (`range_ratio` = M / c∞, default 1, the
  levels spanning the input range): RQP-SGD's M is a bound on the weights,
  not on one update's coordinate, so nothing ties it to c∞; with σ ≫ c∞ a
  range of a few σ keeps the projection's bias small.
* An input lattice (`lattice`, as the quantized Gaussian's: x rounded
  stochastically to L points on [-c∞, c∞] before the noise; registry default
  L = 9, constructor default 0, the paper's): the law is affine in x between
  lattice points, so the accountant's target pairs are exact at the
  vertices. The one-client bound's Gaussian part becomes its chord between
  lattice multiples (α t²/(2σ²) itself does not hold for the lattice
  mixture; `base.lattice_gaussian_local_divergences`).
"""

import math

import numpy as np
from scipy import special

from tff_quant.common import validation
from tff_quant.mechanisms import base

tf = base.tf


class RandomizedProjection(base.InputLattice, base.Mechanism):
  """RandomizedProjection(bound=M, bits=b, q=q, sigma=σ, input_bound=M, lattice=L).

  Args:
    bound: M > 0, the levels span [-M, M].
    bits: b, L = 2^b levels.
    q: the nearest level's probability, in [1/L, 1).
    sigma: σ >= 0, the Gaussian noise.
    input_bound: the inputs' range (default M).
    lattice: 0 (the paper's) or >= 2 input lattice points (module docstring).

  Raises:
    ValueError: a parameter out of its range, naming it.
  """

  name = 'randomized_projection'
  unbiased = False
  TUNABLES = (
      base.Tunable('bits', 4, 1, 24, kind=int, doc='b: L = 2^b levels'),
      base.Tunable('q', 0.9, 0, 1, low_open=True, high_open=True,
                   more_private='lower',
                   doc='probability of the nearest level (>= 1/L); default '
                   '0.9 below 8 bits, 0.99 from 8 bits (`default_q`)'),
      base.Tunable('range_ratio', 1.0, 0, None, low_open=True,
                   doc='M / c∞: the levels span ±M (1: the input range)',
                   grid=tuple(2.0**i for i in range(0, 9))),
      base.Tunable('noise_multiplier', 1.0, 0, None, more_private='higher',
                   doc='σ / c∞'),
      base.lattice_tunable(9),
  )
  # q is not scanned: it doubles the 8-bit calibration (over 15 min on 2
  # shared cores); its default follows the bits instead (`default_q`).
  CALIBRATED = ('range_ratio', 'noise_multiplier')

  @staticmethod
  def default_q(bits: int) -> float:
    """The registry's q at `bits`: 0.9 below 8 bits, 0.99 from 8 bits.

    Measured at the FL table's setting (docs/mechanisms.md): at 8 bits q =
    0.99 serves 1.055×G (ε = 10) and 1.061×G (ε = 3) against 1.101 and
    1.076 at 0.9; at 4 bits 0.9 serves 1.211 and 1.102 against 1.212 and
    1.194 at 0.99.

    Args:
      bits: b >= 1.

    Returns:
      The default q (>= 1/2^b for every b >= 1).
    """
    return 0.99 if bits >= 8 else 0.9

  @classmethod
  def complete_params(cls, params=None):
    """`params` validated, omitted tunables at their defaults; an omitted q
    at `default_q` of the bits.

    Args:
      params: {tunable name: value}, or None.

    Returns:
      Every tunable's value.

    Raises:
      TypeError, ValueError: as `base.Mechanism.complete_params`.
    """
    params = dict(params or {})
    if 'q' not in params:
      bits = cls.tunable('bits').check(
          params.get('bits', cls.tunable('bits').default))
      params['q'] = cls.default_q(bits)
    return super().complete_params(params)

  def __init__(self, bound: float, bits: int, q: float, sigma: float,
               input_bound=None, lattice: int = 0):
    self.bound = float(validation.check_positive('bound', bound))
    self.bits = self.tunable('bits').check(bits)
    big_l = 2**self.bits
    # q >= 1/L: the nearest level is at least as likely as each other one,
    # q >= (1-q)/(L-1). (The bound was 1/(L-1), which left no q at b = 1.)
    self.q = float(validation.check_number('q', q, 1.0 / big_l, 1,
                                           high_open=True))
    self.sigma = float(validation.check_number('sigma', sigma, 0, None))
    ib = self.bound if input_bound is None else input_bound
    self._input_bound = float(validation.check_positive('input_bound', ib))
    self._init_lattice(lattice)

  @classmethod
  def for_coordinate_bound(cls, c_inf, **params):
    """Inputs in [-c_inf, c_inf], levels on ±range_ratio·c_inf, σ =
    noise_multiplier · c_inf."""
    p = cls.complete_params(params)
    return cls(p['range_ratio'] * c_inf, p['bits'], p['q'],
               p['noise_multiplier'] * c_inf, c_inf, p['lattice'])

  def params(self):
    out = dict(bound=self.bound, bits=self.bits, q=self.q, sigma=self.sigma,
               input_bound=self._input_bound)
    if self.lattice:
      out['lattice'] = self.lattice
    return out


  @property
  def num_levels(self):
    return 2**self.bits

  @property
  def input_bound(self):
    return self._input_bound

  @property
  def level_step(self):
    return 2.0 * self.bound / (self.num_levels - 1)

  @property
  def level_offset(self):
    return -self.bound

  def nearest_level_probs(self, x: float) -> np.ndarray:
    """A_i = P(the nearest level of clip(x + N(0, σ²), -M, M) is i)."""
    x = self.clip_input(x)
    edges = self.levels[:-1] + 0.5 * self.level_step   # cell boundaries
    if self.sigma == 0:
      cdf = (x < edges).astype(np.float64)             # cells [Q_i - h, Q_i + h)
    else:
      cdf = special.ndtr((edges - x) / self.sigma)
    cdf = np.concatenate([[0.0], cdf, [1.0]])
    return np.clip(np.diff(cdf), 0.0, 1.0)

  def _paper_log_pmf(self, x):
    """The paper's law (the pmf in the module docstring) of input x."""
    a = self.nearest_level_probs(x)
    other = (1.0 - self.q) / (self.num_levels - 1)
    return np.log(a * self.q + (1.0 - a) * other)

  def _local_divergences(self, orders, distances):
    """The smaller of the Gaussian's α t²/(2σ²) (the rest is input-free
    processing of x + N(0, σ²)) and the L-ary randomized response's D_α
    between two different nearest levels (any law of the nearest level is a
    mixture of those, and Σ P^α Q^(1-α) is jointly convex). With the input
    lattice the Gaussian part is its chord between lattice multiples
    (`base.lattice_gaussian_local_divergences`)."""
    big_l, q = self.num_levels, self.q
    r = (1.0 - q) / (big_l - 1)
    if self.lattice:
      out = base.lattice_gaussian_local_divergences(
          orders, distances, self.sigma, self.lattice_step)
    else:
      out = base.gaussian_local_divergences(orders, distances, self.sigma)
    for a in out:
      if math.isinf(a):
        rr = math.log(q / r)
      elif a == 1:   # KL: q log(q/r) + r log(r/q)
        rr = (q - r) * math.log(q / r)
      else:
        lq, lr = math.log(q), math.log(r)
        terms = [a * lq + (1 - a) * lr, a * lr + (1 - a) * lq]
        if big_l > 2:
          terms.append(math.log((big_l - 2) * r))
        rr = float(special.logsumexp(terms)) / (a - 1)
      out[a] = np.where(np.asarray(distances) > 0, np.minimum(out[a], rr), 0.0)
    return out

  def _encode(self, x, seed):
    """Lattice, noise, clip, nearest level, then keep it or resample, in float64.

    Inside the support: the nearest level is clamped to [0, L - 1] and the
    resampled one is in [0, L - 2], shifted past the nearest: every level is
    in [0, L - 1] (the pmf gives each positive mass). The input (and its
    lattice point, `base.lattice_round`) is the float64 one `sanitize`
    clipped, so the noise is centred where the pmf centres it (the float32
    lattice's end point was float32(c) > c); the uniforms are float64 (a
    float32 one reaches only every other level of 2^24); the noise is a
    float32 normal, cast.
    """
    s_noise, s_keep, s_other, s_lattice = tf.unstack(base.split_seed(seed, 4))
    shape = tf.shape(x)
    x = self._on_lattice(tf.cast(x, tf.float64), s_lattice)
    y = x
    if self.sigma > 0:
      noise = tf.random.stateless_normal(shape, s_noise, dtype=tf.float32)
      y = x + self.sigma * tf.cast(noise, tf.float64)
    y = tf.clip_by_value(y, -self.bound, self.bound)
    top = float(self.num_levels - 1)
    nearest = tf.clip_by_value(tf.floor((y + self.bound) / self.level_step + 0.5),
                               0.0, top)
    keep = base.uniform(shape, s_keep, tf.float64) < self.q
    other = tf.minimum(tf.floor(base.uniform(shape, s_other, tf.float64) * top),
                       top - 1.0)
    other = other + tf.cast(other >= nearest, tf.float64)
    return tf.where(keep, nearest, other)
