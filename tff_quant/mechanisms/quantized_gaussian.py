"""Quantized Gaussian mechanism, Kang et al. (paper 000), Alg. 1 and Def. 1.

x in [-Cq/2, Cq/2] (the client update is l2-clipped to Cq/2, Alg. 1 line 7), then
y = x + N(0, σ²), then the k-level stochastic quantizer of Def. 1 on [-Cq, Cq]
(y outside [-Cq, Cq] saturates to the end level). Levels B(r) = -Cq + 2Cq r/(k-1).

The exact pmf (Lemma 2) is E[hat_r(clip(y))]: Gaussian integrals of piecewise-linear
weights. Tail levels underflow float64 for small σ, so each integral is evaluated in
log space: the Gaussian's largest value on the interval is factored out, the rest
(e^-d(m + d/2) at offsets d from that point, no cancellation) integrated by
composite Gauss-Legendre on panels scaled to its decay rate, and the saturation
terms are `exact_laws.log_normal_cdf`. Every step's rounding and the quadrature's
truncation are bounded: `log_pmf_error` (tests compare with 80-digit mpmath).
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

import decimal
import functools
import math

import numpy as np

from tff_quant.common import exact_laws
from tff_quant.common import validation
from tff_quant.mechanisms import base

tf = base.tf

_NODES = 24          # Gauss-Legendre nodes per panel
_CUTOFF = 70.0       # T: a piece ends where E(d) = d(m + d/2) reaches T
_PANEL_DECAY = 3.0   # panels of width <= 3/max(m, 1)
_MAX_PANELS = 24     # ceil(T/3): D·max(m, 1) <= T on every piece
_SMALL_PIECE = 2.0**-400   # shorter pieces are bounded absolutely
_CHUNK = 2**20       # node evaluations per numpy pass

#: The range of σ `log_pmf_error` covers: levels within MAX_REACH_Z of x in
#: z-units (R = (Cq + c)/σ) and hats at least MIN_CELL_Z wide (W = step/σ),
#: so that every quantity of the integrator stays a normal float.
MAX_REACH_Z = 1e12
MIN_CELL_Z = 1e-100


def _legendre(n, x):
  """(P_n(x), P_n'(x)) by the three-term recurrence, in the current decimal
  context."""
  p0, p1 = decimal.Decimal(1), x
  for k in range(1, n):
    p0, p1 = p1, ((2 * k + 1) * x * p1 - k * p0) / (k + 1)
  return p1, n * (x * p1 - p0) / (x * x - 1)


def _gauss_legendre(n):
  """(τ, ω): the n-point Gauss-Legendre rule on [0, 2] (τ_j = 1 + t_j, t_j
  the nodes on [-1, 1]), each entry the float nearest the exact value.

  Newton's iteration on P_n in 60-digit decimal arithmetic from numpy's
  nodes (0.7 ulp off) until a step is below 1e-50, then ω_j = 2/((1 - t_j²)
  P_n'(t_j)²); float(Decimal) rounds correctly, so |τ̃/τ - 1| and |ω̃/ω - 1|
  are <= u (1.0001u with the decimal error; checked against mpmath in the
  tests). numpy's own weights are up to 79u off, and 1 + t_j from its nodes
  93u (next to -1).

  Raises:
    RuntimeError: Newton's iteration did not converge (it cannot from
      numpy's nodes).
  """
  guesses, _ = np.polynomial.legendre.leggauss(n)
  taus, weights = [], []
  with decimal.localcontext() as ctx:
    ctx.prec = 60
    tol = decimal.Decimal('1e-50')
    for guess in guesses:
      x = decimal.Decimal(float(guess))
      for _ in range(12):
        p, dp = _legendre(n, x)
        step = p / dp
        x -= step
        if abs(step) < tol:
          break
      else:
        raise RuntimeError('Gauss-Legendre nodes: Newton did not converge.')
      _, dp = _legendre(n, x)
      taus.append(float(1 + x))
      weights.append(float(2 / ((1 - x * x) * dp * dp)))
  return np.array(taus), np.array(weights)


_TAU, _OMEGA = _gauss_legendre(_NODES)


def _tree_sum(terms):
  """Row sums of non-negative [rows, n] terms by pairwise folding (zeros
  padded to a power of 2): each term passes through ceil(log2 n) additions,
  so each sum is within (1 + u)^ceil(log2 n) of exact."""
  rows, n = terms.shape
  size = 1 << max(0, (n - 1).bit_length())
  if size > n:
    terms = np.concatenate([terms, np.zeros((rows, size - n))], axis=1)
  while terms.shape[1] > 1:
    half = terms.shape[1] // 2
    terms = terms[:, :half] + terms[:, half:]
  return terms[:, 0]


def _log_hat_integrals(a, width):
  """(log rise, log fall): for each interval [a_i, a_i + W] (z-units, W =
  `width`), log ∫ w(z) φ(z) dz with w = (z - a_i)/W (rise) or
  (a_i + W - z)/W (fall). Vectorised; `QuantizedGaussian.log_pmf_error`
  bounds every step.

  With b = fl(a + W) and z0 the point of the interval nearest 0: a >= 0
  (the interval [a, a + W], z0 = a), b <= 0 ([b - W, b], z0 = b), else
  [a, b] and z0 = 0, split at 0. Each piece runs from z0 a distance d in
  [0, D], m = |z0|, and φ(z) = φ(z0)·e^(-E), E = d(m + d/2) >= 0: no
  cancellation in the exponent. The weight is (g + d)/W moving away from
  the interval's zero end (g = its distance to z0) or (g - d)/W moving
  towards it (D <= g). A piece is cut where E reaches _CUTOFF (d_T = 2T/(m +
  √(m² + 2T))) and split into P = ceil(D·max(m, 1)/3) equal panels, each
  summed by 24-point Gauss-Legendre at nodes d = h·(2p + τ_j), h = D/(2P).
  Sums are pairwise (`_tree_sum`); log I = log Q - (m²/2 + log √(2π)).

  Args:
    a: [n] left ends (floats).
    width: W > 0 (a float).

  Returns:
    Two [n] float64 arrays.
  """
  a = np.asarray(a, np.float64).ravel()
  n = a.size
  b = a + width
  low = a >= 0
  high = ~low & (b <= 0)
  mid = ~low & ~high
  m_interval = np.where(low, a, np.where(high, -b, 0.0))
  ends = ~mid
  full = np.full(n, width)
  # Pieces: interval, m, length, rise (g, +1 away / -1 towards), fall (g, ±1).
  pieces = [
      (np.flatnonzero(ends), m_interval[ends], full[ends],
       np.where(low, 0.0, width)[ends], np.where(low, 1.0, -1.0)[ends],
       np.where(low, width, 0.0)[ends], np.where(low, -1.0, 1.0)[ends]),
      (np.flatnonzero(mid), np.zeros(mid.sum()), b[mid], -a[mid],
       np.ones(mid.sum()), b[mid], -np.ones(mid.sum())),          # up from 0
      (np.flatnonzero(mid), np.zeros(mid.sum()), -a[mid], -a[mid],
       -np.ones(mid.sum()), b[mid], np.ones(mid.sum()))]          # down from 0
  idx, m, length, g_rise, s_rise, g_fall, s_fall = (
      np.concatenate(column) for column in zip(*pieces))
  rate = np.maximum(m, 1.0)
  reach = 2 * _CUTOFF / (m + np.sqrt(m * m + 2 * _CUTOFF))
  span = np.minimum(length, reach)
  panels = np.clip(np.ceil(span * rate / _PANEL_DECAY), 1, None).astype(np.int64)
  if panels.size and panels.max() > _MAX_PANELS:
    raise AssertionError('more panels than the analysis allows')
  half = span / (2 * panels)
  rise = np.zeros(n)
  fall = np.zeros(n)
  for count in np.unique(panels):
    sel = np.flatnonzero(panels == count)
    offsets = (2.0 * np.arange(count)[:, None] + _TAU).ravel()   # fl(2p + τ_j)
    omega = np.tile(_OMEGA, count)
    for chunk in np.array_split(sel, -(-sel.size * offsets.size // _CHUNK)):
      col = lambda v: v[chunk, None]
      h = col(half)
      d = h * offsets
      with np.errstate(under='ignore'):
        ex = np.exp(-(d * (col(m) + 0.5 * d)))
      wh = omega * h
      for g, sign, out in ((g_rise, s_rise, rise), (g_fall, s_fall, fall)):
        weight = np.where(col(sign) > 0, col(g) + d, col(g) - d) / width
        np.add.at(out, idx[chunk], _tree_sum((wh * weight) * ex))
  with np.errstate(divide='ignore'):
    shift = 0.5 * m_interval * m_interval + exact_laws.LOG_SQRT_2PI
    return np.log(rise) - shift, np.log(fall) - shift


class QuantizedGaussian(base.InputLattice, base.SymmetricLevels,
                        base.Mechanism):
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
  def level_range(self):
    """The levels span [-clip, clip] (`base.SymmetricLevels`)."""
    return self.clip

  def _paper_log_pmf(self, x):
    """The paper's law (Lemma 2) of an input x in [-c, c]: hats by
    `_log_hat_integrals`, saturation by `exact_laws.log_normal_cdf`."""
    zs = (self.levels - x) / self.sigma     # level positions in z-units
    k = self.k
    # Hat of level r: rises on [B(r-1), B(r)], falls on [B(r), B(r+1)].
    rise = np.full(k, -np.inf)
    fall = np.full(k, -np.inf)
    rise[1:], fall[:-1] = _log_hat_integrals(zs[:-1], self.level_step / self.sigma)
    out = np.logaddexp(rise, fall)
    # Saturation: the exact arguments are <= 0; clamping can only move the
    # computed ones towards them.
    low, _ = exact_laws.log_normal_cdf(min(zs[0], 0.0))
    high, _ = exact_laws.log_normal_cdf(min(-zs[-1], 0.0))
    out[0] = np.logaddexp(out[0], low)
    out[-1] = np.logaddexp(out[-1], high)
    return out

  @functools.cached_property
  def log_pmf_error(self) -> float:
    """η: a proved bound on |computed - exact| of `log_pmf` at every input,
    under `exact_laws`' arithmetic model and its ndtr assumption; computed
    once.

    The exact law: levels -Cq + r·2Cq/(k-1), the input x as the code
    receives it (with the lattice, its float lattice points and weight,
    as the sampler's `base.lattice_round`). R = (Cq + c)/σ bounds every |z|.

    Positions. zs = (levels - x)/σ is within Δ = (5.04·Cq/σ + 2.03R)u of
    exact (the step 2Cq/(k-1), r·step, -Cq +, - x, /σ), W̃ = fl(step/σ)
    within 2.01u relative. Each computed hat integral is the exact one of an
    interval shifted by <= δ = Δ + 1.02u·R (b = fl(a + W̃)) and of width
    within 3.04u relative; for I(a, W) = ∫_0^1 W·ω(t)φ(a + Wt) dt,
    |∂_a log I| = |E[z]| <= max|z| and |∂ log I/∂ log W| <= 1 + W·max|z|, so
    the move is <= δ(R + δ) + 3.04u(1 + W̃(R + δ)). Saturation: log Φ has
    slope <= |t| + 1 for t <= 0, so Δ(R + Δ + 1).

    Quadrature (`_log_hat_integrals`), relative to Q = I/φ(z0):
    * Lower bound: G = |z0 - e0| (e0 the weight's zero end), ℓ =
      min(W, 1/max(m, 1)). A stretch S of the interval of length ℓ holding
      z0 has E <= 1.5 and ∫_S |z - e0| >= ℓ·max(ℓ, G)/4 (>= ℓ²/2 always;
      >= ℓ·G/2 if G >= 2ℓ), so Q >= Q_floor = e^-1.5·ℓ·max(ℓ, G)/(4W); and
      Q <= 2√(π/2).
    * Gauss-Legendre (Trefethen, ATAP Thm 19.3; ρ = 4, n = 24): on a
      panel's Bernstein ellipse (half-width h <= 1.5/max(m, 1), centre
      d_lo + h) Re E >= -1.125·m·h - h²B²/2 >= -5.643 (B = (ρ - 1/ρ)/2) and
      |weight| <= (G + d_lo + 3.125h)/W, so a panel errs by <= h·(64/15)·
      ρ^-48/(ρ² - 1)·282.3·(G + d_lo + 3.125h)/W. Summed over panels,
      <= K'·(G·D/2 + 0.79D²)/W (D the pieces' total length); divided by
      Q_floor and with D/ℓ <= T: q = K'·4e^1.5·(T/2 + 0.79T²), whatever W
      and m. E·(integrand) the same times |E| <= 163.2 on the ellipses.
    * Cut-off: past d_T, E >= T + (m + d_T)(d - d_T), so the rest of a piece
      is <= e^-T·((G + d_T)/(m + d_T) + 1/(m + d_T)²)/W. A piece is cut only
      if W > d_T >= 10/max(m, 1); then ℓ = 1/max(m, 1), m + d_T >= 1/ℓ and
      d_T/(m + d_T) <= T·ℓ², so relative to Q_floor it is <= 4e^(1.5-T)·
      (T + 2) per piece.
    * Rounding, term by term against the exact rule (τ, ω within u; nodes
      d = fl(h̃·fl(2p + τ̃)) within 4.01u relative; E within 10.1u·E; exp
      lib; ω̃, h̃ and three products 5.01u; the weight 6.03u away from its zero end,
      and towards it |Δ(g - d)| <= 4.01u·d, which averages to <= 8.02u + 2u
      because
      Σ ω e^-E (g - d) >= (g/2) Σ ω e^-E (Chebyshev's sum inequality: both
      decrease in d; Gauss-Legendre is exact on g - d and D <= g). The
      E-terms average to 10.1u·mean(E): with s = E(d), the weight's density
      in s is ∝ ρ(s)e^-s with ρ(s)/s non-increasing (away) or ρ(s)
      non-increasing (towards), so mean(E) <= 2 (Gamma(2)'s mean; likelihood
      ratio order), plus the quadrature's q. The pairwise sums ((1 + u)^10,
      24 panels · 24 nodes <= 1024) and the second piece's addition 11.11u;
      the middle case's width b - a vs W̃ 1.01u. Pieces shorter than 2^-400
      (all others keep every quantity normal) are bounded absolutely by
      1.01·D.
    Then log Q (lib·|log Q|), m·m and log √(2π) (`exact_laws.
    LOG_SQRT_2PI_ERROR`), and the last subtraction (u·Λ, Λ = R²/2 + log
    √(2π) + |log Q|max bounds every |log P_r|). Saturation:
    `exact_laws.log_normal_cdf_error_bound`(R + Δ). Each entry is one
    logaddexp of these (`exact_laws.log_add_error`). With the lattice, the
    two-point mixture (`exact_laws.two_point_mixture_error`) with gap <=
    h(R + 1)/σ + 2η (|∂_x log P_r| <= (R + 1)/σ: the hats' |y - x| <= σR,
    the saturation tails' mean excess <= σ(|z| + 1)).

    Raises:
      ValueError: σ outside the covered range (MAX_REACH_Z, MIN_CELL_Z).
    """
    u = exact_laws.U
    lib = 2 * exact_laws.ELEMENTARY_ULPS * u
    reach = (self.clip + self.bound) / self.sigma * (1 + 4 * u)
    width = self.level_step / self.sigma
    if not (reach <= MAX_REACH_Z and width >= MIN_CELL_Z):
      raise ValueError(
          '`sigma` is outside the range `log_pmf_error` covers: it needs '
          f'(clip + input_bound)/sigma <= {MAX_REACH_Z:g} and level_step/sigma '
          f'>= {MIN_CELL_Z:g}, got {reach:.3g} and {width:.3g}.')
    width_up = width * (1 + 4 * u)
    r1 = max(reach, 1.0)
    delta = (5.04 * self.clip / self.sigma + 2.03 * reach) * u
    shift = delta + 1.02 * u * reach
    z_max = reach * (1 + 1e-12) + shift
    positions = shift * z_max + 3.04 * u * (1 + width_up * z_max)
    # Quadrature, relative to Q = I/φ(z0).
    ell = min(width, 1.0 / r1) * (1 - 1e-12)
    q_floor = math.exp(-1.5) * ell * ell / (4 * width_up)
    log_q = max(math.log(2 * math.sqrt(math.pi / 2)), -math.log(q_floor)) + 1e-9
    rho = 4.0
    b_axis = (rho - 1 / rho) / 2
    ellipse = math.exp(1.125 * 1.5 + 0.5 * 2.25 * b_axis**2) * (1 + 1e-9)
    k_panel = 64 / 15 / (rho**2 - 1) * rho**(-2 * _NODES) * ellipse
    quad = (k_panel * 4 * math.exp(1.5) * (_CUTOFF / 2 + 0.79 * _CUTOFF**2)
            * (1 + 1e-6))
    e_ellipse = (_CUTOFF + 1.6875 + 0.5 * (math.sqrt(2 * _CUTOFF) + 1.6875)**2)
    mean_e = (2 + e_ellipse * quad) / (1 - quad)
    cut = 2 * 4 * math.exp(1.5 - _CUTOFF * (1 - 1e-9)) * (_CUTOFF + 2)
    small = 2 * 1.02 * _SMALL_PIECE / q_floor
    terms = 2 * _MAX_PANELS * _NODES
    underflow = terms * 5 * 2.0**-1074 / q_floor
    rounding = (10.03 * u + 5.01 * u + lib + 10.1 * u * mean_e + 11.11 * u +
                1.01 * u) * (1 + 1e-6)
    rel = rounding + quad + cut + small + underflow
    log_big = 0.5 * z_max * z_max + exact_laws.LOG_SQRT_2PI + log_q
    eta_int = (-math.log1p(-rel) + lib * log_q + u * z_max * z_max * (1 + 1e-9)
               + u * exact_laws.LOG_SQRT_2PI + exact_laws.LOG_SQRT_2PI_ERROR
               + u * log_big) * (1 + 1e-9) + positions
    eta_sat = (exact_laws.log_normal_cdf_error_bound(reach + delta) +
               delta * (reach + delta + 1))
    eta = (max(eta_int, eta_sat) + exact_laws.log_add_error(log_big)) * (1 + 1e-6)
    if self.lattice:
      gap = self.lattice_step * (reach + 1) / self.sigma * (1 + 1e-9) + 2 * eta
      eta += exact_laws.two_point_mixture_error(log_big, gap, one_sided=False)
    return eta

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
    centres it; the noise is a float64 normal (a float32 one resolves its
    uniforms to 2^-23 only: docs/privacy.md, Numerics 6).
    """
    s_noise, s_round, s_lattice = tf.unstack(base.split_seed(seed, 3))
    x = self._on_lattice(tf.cast(x, tf.float64), s_lattice)
    noise = tf.random.stateless_normal(tf.shape(x), s_noise, dtype=tf.float64)
    y = x + self.sigma * noise
    y = tf.clip_by_value(y, -self.clip, self.clip)
    return base.round_within((y + self.clip) / self.level_step, 0, self.k - 1,
                             s_round)
