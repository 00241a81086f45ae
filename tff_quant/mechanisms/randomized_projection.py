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

import functools
import math

import numpy as np
from scipy import special

from tff_quant.common import exact_laws
from tff_quant.common import validation
from tff_quant.mechanisms import base

tf = base.tf


class RandomizedProjection(base.InputLattice, base.SymmetricLevels,
                           base.Mechanism):
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
  def level_range(self):
    """The levels span [-bound, bound] (`base.SymmetricLevels`)."""
    return self.bound

  def nearest_level_probs(self, x: float) -> np.ndarray:
    """A_i = P(the nearest level of clip(x + N(0, σ²), -M, M) is i).

    Cell i spans z in [lo_i, hi_i] (z = (edge - x)/σ; the end cells reach
    ∓∞). Each A_i is a difference of ndtr on the cell's tail side:
    Φ(-lo) - Φ(-hi) where lo + hi > 0, else Φ(hi) - Φ(lo), so a cell away
    from x is a difference of two small tails, each with the relative error
    `exact_laws.ndtr_relative_error` (1 - Φ(t) for t > 0 would lose it all:
    the last cell was 1 - ndtr(edge), 0 far above x).

    Args:
      x: the input, clipped to [-input_bound, input_bound].

    Returns:
      [L] probabilities in [0, 1], within `log_pmf_error`'s analysis.
    """
    x = self.clip_input(x)
    edges = self.levels[:-1] + 0.5 * self.level_step   # cell boundaries
    if self.sigma == 0:
      cdf = (x < edges).astype(np.float64)             # cells [Q_i - h, Q_i + h)
      cdf = np.concatenate([[0.0], cdf, [1.0]])
      return np.clip(np.diff(cdf), 0.0, 1.0)
    z = (edges - x) / self.sigma
    lo = np.concatenate([[-np.inf], z])
    hi = np.concatenate([z, [np.inf]])
    up = lo + hi > 0
    a = np.where(up, special.ndtr(-lo) - special.ndtr(-hi),
                 special.ndtr(hi) - special.ndtr(lo))
    return np.clip(a, 0.0, 1.0)

  def _paper_log_pmf(self, x):
    """The paper's law (the pmf in the module docstring) of input x, as
    r + A·(q - r), r = (1-q)/(L-1) <= q: three roundings of positive terms."""
    a = self.nearest_level_probs(x)
    other = (1.0 - self.q) / (self.num_levels - 1)
    return np.log(other + a * (self.q - other))

  @functools.cached_property
  def log_pmf_error(self) -> float:
    """η: a proved bound on |computed - exact| of `log_pmf` at every input,
    under `exact_laws`' model and its ndtr assumption (NDTR_U_*); computed
    once.

    P_i = r + A_i(q - r) >= r, so A's absolute error ΔA moves log P_i by
    at most (q - r)|ΔA|/P_i <= min(|ΔA|/A, (q - r)|ΔA|/r). Each edge value
    ndtr(s̃), s̃ = ±z̃ on the tail side, is within Φ(s)·e(|s|) of exact,
    e(t) = ε(t + D)(1 + μ) + μ, ε the ndtr assumption, μ = expm1((t + D +
    1)·D) the computed argument's error |z̃ - z| <= D = 6.01u·M/σ +
    2.01u·(M + X)/σ (edges as rounded by `levels`; Φ's hazard at -t is
    <= t + 1, Sampford 1953); below -37, only 0 <= ndtr <= NDTR_TINY. A
    cell on one side of x, tail coordinates [α, α + w] (w = 2M/((L-1)σ), or
    α + ∞ at an end): Φ(-α - w) <= Φ(-α)·ρ, ρ = e^(-w·max(α, √(2/π))) (the
    hazard is increasing and >= t), so A >= Φ(-α)(1 - ρ) and |ΔA|/A <=
    (e(α) + e(α + w)ρ)/(1 - ρ); sup over α on a 0.02 grid, each interval's
    increasing parts at its right end and decreasing at its left. A cell
    containing x (z̃ changes sign in it): |ΔA| <= 2·sup_t e(t)Φ(-t) + u,
    A >= min(w, 1)·φ(1 + D). The subtraction adds u·A; r + A(q - r) three
    roundings (3.01u relative); log adds lib·|log r|. With the lattice, the
    two-point mixture's rounding (`exact_laws.two_point_mixture_error`,
    at the float weight the code computes, as the sampler's
    `base.lattice_round`).

    Raises:
      ValueError: σ so small or large against the levels that the
        derivation's inputs leave float64 (MAX_REACH_Z, MIN_CELL_Z).
    """
    u = exact_laws.U
    lib = 2 * exact_laws.ELEMENTARY_ULPS * u
    big_l, q = self.num_levels, self.q
    r = (1.0 - q) / (big_l - 1) * (1 - 4 * u)     # below the exact r
    log_r = abs(math.log(r)) * (1 + 1e-12)
    delta_a = 0.0
    if self.sigma > 0:
      reach = (self.bound + self.input_bound) / self.sigma
      width = 2 * self.bound / ((big_l - 1) * self.sigma)
      if not (reach <= MAX_REACH_Z and width >= MIN_CELL_Z):
        raise ValueError(
            '`sigma` is outside the range `log_pmf_error` covers: it needs '
            f'(bound + input_bound)/sigma <= {MAX_REACH_Z:g} and 2·bound/'
            f'((L-1)·sigma) >= {MIN_CELL_Z:g}, got {reach:.3g} and {width:.3g}.')
      delta_a = _cell_error(width, self.bound / self.sigma, reach,
                            (q - r) / r * (1 + 1e-12))
    delta_p = (1 + delta_a) * (1 + 3.01 * u) - 1
    eta = (-math.log1p(-delta_p) + lib * log_r) * (1 + 1e-6)
    if self.lattice:
      eta += exact_laws.two_point_mixture_error(
          log_r, math.log(q) + log_r + 2 * eta, one_sided=False)
    return eta

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
    float64 normal too.
    """
    s_noise, s_keep, s_other, s_lattice = tf.unstack(base.split_seed(seed, 4))
    shape = tf.shape(x)
    x = self._on_lattice(tf.cast(x, tf.float64), s_lattice)
    y = x
    if self.sigma > 0:
      noise = tf.random.stateless_normal(shape, s_noise, dtype=tf.float64)
      y = x + self.sigma * noise
    y = tf.clip_by_value(y, -self.bound, self.bound)
    top = float(self.num_levels - 1)
    nearest = tf.clip_by_value(tf.floor((y + self.bound) / self.level_step + 0.5),
                               0.0, top)
    keep = base.uniform(shape, s_keep, tf.float64) < self.q
    other = tf.minimum(tf.floor(base.uniform(shape, s_other, tf.float64) * top),
                       top - 1.0)
    other = other + tf.cast(other >= nearest, tf.float64)
    return tf.where(keep, nearest, other)


#: The range of σ `log_pmf_error` covers: edges within MAX_REACH_Z of x in
#: z-units (the arguments' rounding then stays below 1e-3), cells at least
#: MIN_CELL_Z wide (a cell's mass stays positive in float64).
MAX_REACH_Z = 1e12
MIN_CELL_Z = 1e-200
_GRID_STEP = 0.02   # `_cell_error`'s grid of tail coordinates
_GRID_END = 38.5    # past it Φ(-t) < 3e-324: every entry is NDTR_TINY's


def _cell_error(width: float, range_z: float, reach_z: float,
                floor_ratio: float) -> float:
  """A bound on (q - r)|ΔA_i|/P_i over every cell and input
  (`RandomizedProjection.log_pmf_error` has the derivation).

  Args:
    width: w, the cells' width in z-units (2M/((L-1)σ)).
    range_z: M/σ.
    reach_z: (M + X)/σ, the largest |z| of an edge.
    floor_ratio: (q - r)/r (an upper bound).

  Returns:
    The bound (relative, on P_i).
  """
  u = exact_laws.U
  w_low, w_up = width * (1 - 4 * u), width * (1 + 4 * u)
  arg = (6.01 * u * range_z + 2.01 * u * reach_z) * (1 + 1e-9)
  tiny = exact_laws.NDTR_TINY
  normal_end = -exact_laws.NDTR_NORMAL_FROM - arg

  def e(t):   # relative error of one edge value at tail coordinate t
    mu = np.expm1((t + arg + 1) * arg)
    return exact_laws.ndtr_relative_error(t + arg) * (1 + mu) + mu

  top = min(_GRID_END, reach_z + arg)
  grid = np.append(np.arange(0.0, top, _GRID_STEP), top)
  lo, hi = np.maximum(grid[:-1] - arg, 0.0), grid[1:] + arg
  tail_up = exact_laws.normal_tail_upper(lo) * (1 + 2 * arg)
  # One side of x. Edges past NDTR_NORMAL_FROM carry only NDTR_TINY.
  rate = w_low * np.maximum(lo, math.sqrt(2 / math.pi) * (1 - 2 * arg))
  rho = np.exp(-rate)
  first = np.where(hi <= normal_end, e(hi) * tail_up, tiny)
  far_edge = np.minimum(hi + w_up, normal_end)
  second = np.where(hi + w_up <= normal_end, e(far_edge) * tail_up * rho, tiny)
  with np.errstate(divide='ignore', over='ignore'):
    mass_low = exact_laws.normal_tail_lower(hi) * (-np.expm1(-rate))
    relative = np.where(mass_low > 0, (first + second) / mass_low, np.inf)
  absolute = floor_ratio * (first + second)
  one_side = float(np.max(np.minimum(relative, absolute), initial=0.0))
  if reach_z + arg > _GRID_END:   # both edges' values and errors <= NDTR_TINY
    one_side = max(one_side, floor_ratio * 2 * tiny)
  # A cell containing x: both edges within w of it.
  edge = float(np.max(np.where(hi <= normal_end, e(hi) * tail_up, tiny)[
      lo <= w_up], initial=0.0))
  spread = 2 * edge + u
  mass = min(w_low, 1.0) * math.exp(-0.5 * (1 + arg)**2) / math.sqrt(2 * math.pi)
  across = min(spread / (mass * (1 - 1e-12)), floor_ratio * spread)
  return (max(one_side, across) + u) * (1 + 1e-9)
