"""Quantized Gaussian mechanism, Kang et al. (paper 000), Alg. 1 and Def. 1.

x in [-Cq/2, Cq/2] (the client update is l2-clipped to Cq/2, Alg. 1 line 7), then
y = x + N(0, σ²), then the k-level stochastic quantizer of Def. 1 on [-Cq, Cq]
(y outside [-Cq, Cq] saturates to the end level). Levels B(r) = -Cq + 2Cq r/(k-1).

The exact pmf (Lemma 2) is E[hat_r(clip(y))]: Gaussian integrals of piecewise-linear
weights. Tail levels underflow float64 for small σ, so each integral is evaluated in
log space: the Gaussian's largest value on the interval is factored out and the rest
integrated by composite Gauss-Legendre on panels scaled to its decay rate, which
gives full relative precision far in the tails (tests compare with scipy.integrate).
Unbiased only up to saturation: E[value] = E[clip(x + N, -Cq, Cq)].

Departures from the paper, each derived from the sampler and checked by Monte
Carlo (tests/mechanisms/quantized_gaussian_test.py):
* The quantizer's range is a tunable (`range_ratio` = Cq / c∞, the levels
  span [-Cq, Cq]; default 2, the paper's Cq = 2 × the input bound). Kang et
  al. set Cq from the ℓ2 clip of the whole update, which per coordinate is
  far wider than 2c∞; with σ ≫ c∞ a range of 2-3σ keeps the saturation bias
  small and the levels fine. The noise is σ = z · 2c∞ whatever the range
  (`noise_multiplier` z), so the range trades bias against level spacing
  without changing privacy's scale.
* An input lattice (`lattice` = L >= 2 points on [-c∞, c∞], spacing
  h = 2c∞/(L-1); 0 = none, the paper's): x is first rounded stochastically
  to an adjacent lattice point (unbiased, variance <= h²/4), then noised and
  quantized as in the paper. The law is then affine in x between lattice
  points and continuous, so the accountant evaluates target pairs exactly
  at the vertices (`piecewise_affine`) instead of bounding them by cell
  envelopes whose error is first order in the cell width. The one-client
  bound α t²/(2σ²) does not hold for the mixture (at t < h its χ² is
  w²(e^{h²/σ²} - 1) > w²h²/σ² for w = t/h); its chord in exp((α-1)·)
  between lattice multiples does (`base.lattice_gaussian_local_divergences`:
  couple the two roundings by one uniform).
  Registry default L = 9 (h = c∞/4: variance <= c∞²/64); the constructor's
  default is the paper's L = 0.
"""

import math

import numpy as np
from scipy import special

from tff_quant.common import validation
from tff_quant.mechanisms import base

tf = base.tf

_GL_NODES, _GL_WEIGHTS = np.polynomial.legendre.leggauss(24)
_MAX_PANELS = 48
_PANEL_DECAY = 3.0   # each panel spans <= 3 e-folds of the Gaussian's decay
_NEGLIGIBLE = 60.0   # e-folds beyond which the integrand is below 1e-26 relative


def _log_gauss_linear_integral(a, b, wa, wb):
  """log ∫_a^b w(z) φ(z) dz, w linear from wa at a to wb at b (w >= 0), a < b.

  Vectorised over equal-length arrays. Factors out φ at the point of [a, b]
  closest to 0 and integrates the remainder on graded panels; intervals are
  grouped by panel count, so 2^16 levels cost one numpy pass per count.
  """
  a, b, wa, wb = (np.asarray(v, np.float64).ravel() for v in (a, b, wa, wb))
  z = np.clip(0.0, a, b)                       # argmax of φ on [a, b]
  rate = np.maximum(np.abs(z), 1.0)            # decay rate of φ(z)/φ(z0) near z0
  panel = _PANEL_DECAY / rate
  reach = (_NEGLIGIBLE + 10.0) / rate          # far enough for any rate
  out = np.full(a.size, -np.inf)
  for lo, hi in ((z, np.minimum(b, z + reach)), (np.maximum(a, z - reach), z)):
    width = hi - lo
    panels = np.where(width > 0, np.clip(np.ceil(width / panel), 1, _MAX_PANELS),
                      0).astype(np.int64)
    for count in np.unique(panels[panels > 0]):
      idx = np.flatnonzero(panels == count)
      edges = lo[idx, None] + width[idx, None] * np.linspace(0.0, 1.0, count + 1)
      half = 0.5 * np.diff(edges, axis=1)[:, :, None]
      zz = 0.5 * (edges[:, 1:] + edges[:, :-1])[:, :, None] + half * _GL_NODES
      at = lambda v: v[idx, None, None]
      w = at(wa) + at(wb - wa) * (zz - at(a)) / at(b - a)
      with np.errstate(divide='ignore'):   # w = 0: a zero term
        terms = (np.log(np.maximum(w, 0.0)) + np.log(half * _GL_WEIGHTS) -
                 0.5 * (zz * zz - at(z)**2))
      out[idx] = np.logaddexp(
          out[idx], special.logsumexp(terms.reshape(idx.size, -1), axis=1))
  return out - 0.5 * z * z - 0.5 * math.log(2 * math.pi)


class QuantizedGaussian(base.InputLattice, base.Mechanism):
  """QuantizedGaussian(clip=Cq, num_levels=k, sigma=σ, input_bound=c, lattice=L).

  Args:
    clip: Cq > 0, the levels span [-Cq, Cq].
    num_levels: k >= 2 levels.
    sigma: σ > 0, the Gaussian noise's standard deviation.
    input_bound: c in (0, Cq], inputs are clipped to [-c, c] (default Cq/2,
      the paper's).
    lattice: L = 0 (the paper's) or L >= 2 input lattice points (module
      docstring).

  Raises:
    ValueError: a parameter out of its range, naming it.
  """

  name = 'quantized_gaussian'
  TUNABLES = (
      base.levels_tunable(16, 'k'),
      base.Tunable('range_ratio', 2.0, 0, None, low_open=True,
                   doc='Cq / c∞: the levels span ±Cq (2: the paper\'s)',
                   grid=tuple(2.0**i for i in range(1, 9))),
      base.Tunable('noise_multiplier', 1.0, 0, None, low_open=True,
                   more_private='higher', doc='z = σ / (2c∞)'),
      base.lattice_tunable(9),
  )
  CALIBRATED = ('range_ratio', 'noise_multiplier')
  unbiased = False  # E[value] = E[clip(x + N, -Cq, Cq)]: biased by saturation
  jit_encode = False  # XLA's normal sampler is slower than TF's kernel here

  def __init__(self, clip: float, num_levels: int, sigma: float,
               input_bound: float = None, lattice: int = 0):
    self.clip = float(validation.check_positive('clip', clip))
    self.k = self.tunable('num_levels').check(num_levels)
    self.sigma = float(validation.check_positive('sigma', sigma))
    self.bound = (0.5 * self.clip if input_bound is None else float(
        validation.check_number('input_bound', input_bound, 0, self.clip,
                                low_open=True)))
    self._init_lattice(lattice)

  @classmethod
  def for_coordinate_bound(cls, c_inf, **params):
    """Inputs in [-c_inf, c_inf], levels on ±range_ratio·c_inf, σ = z · 2c_inf."""
    p = cls.complete_params(params)
    return cls(p['range_ratio'] * c_inf, p['num_levels'],
               p['noise_multiplier'] * 2 * c_inf, c_inf, p['lattice'])

  def params(self):
    out = dict(clip=self.clip, num_levels=self.k, sigma=self.sigma)
    if self.bound != 0.5 * self.clip:
      out['input_bound'] = self.bound
    if self.lattice:
      out['lattice'] = self.lattice
    return out

  @property
  def num_levels(self):
    return self.k

  @property
  def input_bound(self):
    return self.bound


  @property
  def level_step(self):
    return 2.0 * self.clip / (self.k - 1)

  @property
  def level_offset(self):
    return -self.clip

  def _paper_log_pmf(self, x):
    """The paper's law (Lemma 2) of an input x in [-c, c]."""
    b = self.levels
    zs = (b - x) / self.sigma               # level positions in z-units
    k = self.k
    # Hat of level r: rises on [B(r-1), B(r)], falls on [B(r), B(r+1)].
    rise = np.full(k, -np.inf)
    fall = np.full(k, -np.inf)
    rise[1:] = _log_gauss_linear_integral(zs[:-1], zs[1:], np.zeros(k - 1),
                                          np.ones(k - 1))
    fall[:-1] = _log_gauss_linear_integral(zs[:-1], zs[1:], np.ones(k - 1),
                                           np.zeros(k - 1))
    out = np.logaddexp(rise, fall)
    out[0] = np.logaddexp(out[0], special.log_ndtr(zs[0]))      # saturate low
    out[-1] = np.logaddexp(out[-1], special.log_ndtr(-zs[-1]))  # saturate high
    return out

  def _local_divergences(self, orders, distances):
    """α t²/(2σ²): without the lattice, the output is input-free processing
    of x + N(0, σ²); with it, that bound's chord between lattice multiples
    (`base.lattice_gaussian_local_divergences`)."""
    if self.lattice:
      return base.lattice_gaussian_local_divergences(
          orders, distances, self.sigma, self.lattice_step)
    return base.gaussian_local_divergences(orders, distances, self.sigma)

  def _encode(self, x, seed):
    """Lattice, noise, saturation and the k-level quantizer, in float64.

    Inside the support: y is clipped to [-Cq, Cq] and t = (y + Cq)/step
    rounded within [0, k - 1] (`base.round_within`): at c = 0.0331 with
    Cq = c a float32 t at y = Cq rounded to level k (6 in 1e7 draws at
    k = 16, 19,472 at k = 2^16). The input (and its lattice point, `base.lattice_round`) is the
    float64 one `sanitize` clipped, so the noise is centred where the pmf
    centres it; the noise is a float32 normal, cast.
    """
    s_noise, s_round, s_lattice = tf.unstack(base.split_seed(seed, 3))
    x = self._on_lattice(tf.cast(x, tf.float64), s_lattice)
    noise = tf.random.stateless_normal(tf.shape(x), s_noise, dtype=tf.float32)
    y = x + self.sigma * tf.cast(noise, tf.float64)
    y = tf.clip_by_value(y, -self.clip, self.clip)
    return base.round_within((y + self.clip) / self.level_step, 0, self.k - 1,
                             s_round)
