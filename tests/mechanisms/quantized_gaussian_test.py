import math

import mpmath
import numpy as np
import pytest
from scipy import integrate, stats

from tests.mechanisms import mechanism_checks as checks
from tff_quant.accounting import divergence
from tff_quant.mechanisms import quantized_gaussian as qg

PARAMS = [dict(clip=1.0, num_levels=8, sigma=0.3), dict(clip=1.0, num_levels=2, sigma=1.0),
          dict(clip=0.5, num_levels=64, sigma=0.05),
          dict(clip=2.0, num_levels=16, sigma=0.4, input_bound=0.25, lattice=5),
          dict(clip=1.0, num_levels=8, sigma=0.3, lattice=2)]


def quad_pmf(mech, x):
  """Lemma 2 by adaptive quadrature (independent of the log-space integrator)."""
  b, d, s = mech.levels, mech.level_step, mech.sigma
  f = lambda y: stats.norm.pdf(y, x, s)
  out = []
  for r in range(mech.num_levels):
    val = 0.0
    if r > 0:
      val += integrate.quad(lambda y: f(y) * (y - b[r - 1]) / d, b[r - 1], b[r],
                            epsabs=0, epsrel=1e-12)[0]
    if r < mech.num_levels - 1:
      val += integrate.quad(lambda y: f(y) * (b[r + 1] - y) / d, b[r], b[r + 1],
                            epsabs=0, epsrel=1e-12)[0]
    out.append(val)
  out[0] += stats.norm.cdf(b[0], x, s)
  out[-1] += stats.norm.sf(b[-1], x, s)
  return np.array(out)


@pytest.mark.parametrize('x', [-0.5, 0.0, 0.21, 0.5])
def test_pmf_matches_quadrature(x):
  mech = qg.QuantizedGaussian(clip=1.0, num_levels=8, sigma=0.3)
  np.testing.assert_allclose(mech.pmf(x), quad_pmf(mech, x), rtol=1e-9)


def test_tail_log_pmf_accurate_where_float64_underflows():
  """σ tiny: far levels ~ exp(-1e4); compare with the asymptotic Mills ratio."""
  mech = qg.QuantizedGaussian(clip=1.0, num_levels=4, sigma=0.01)
  x = -0.5
  log_p = mech.log_pmf(x)
  assert np.all(np.isfinite(log_p))
  # The top level is reached only through saturation + the last hat's rise;
  # both integrals are dominated near B(k-2) = 1/3: log P ~ -z^2/2 - log z^2 ...
  # Check instead against a direct log-space quadrature of the rise integral.
  b, d, s = mech.levels, mech.level_step, mech.sigma
  z_lo, z_hi = (b[2] - x) / s, (b[3] - x) / s
  def scaled(z):  # integrand divided by phi(z_lo)
    return (z - z_lo) * s / d * math.exp(-0.5 * (z * z - z_lo * z_lo))
  val = integrate.quad(scaled, z_lo, z_hi, epsabs=0, epsrel=1e-12, limit=200,
                       points=[z_lo + k / z_lo for k in (1, 5, 20)])[0]
  tail = integrate.quad(lambda z: math.exp(-0.5 * (z * z - z_lo * z_lo)),
                        z_hi, z_hi + 50, epsabs=0, epsrel=1e-12)[0]
  expected = (-0.5 * z_lo**2 - 0.5 * math.log(2 * math.pi) +
              math.log(val + tail))
  assert log_p[3] < -3000  # exp(-3000) underflows float64
  assert log_p[3] == pytest.approx(expected, rel=1e-9)


def test_decode_unbiased_without_saturation():
  mech = qg.QuantizedGaussian(clip=1.0, num_levels=16, sigma=0.04)  # 12 sigma margin
  for x in [-0.5, 0.13, 0.5]:
    checks.assert_pmf_mean_is_input(mech, x, atol=1e-9)
    checks.assert_decode_unbiased(mech, x)


def test_saturation_bias_is_reported_by_pmf():
  mech = qg.QuantizedGaussian(clip=1.0, num_levels=8, sigma=1.0)
  assert np.dot(mech.levels, mech.pmf(0.5)) < 0.45


@pytest.mark.parametrize('kwargs, name, error', [
    (dict(clip=0.0), 'clip', ValueError), (dict(num_levels=1), 'num_levels', ValueError),
    (dict(sigma=0.0), 'sigma', ValueError), (dict(sigma=float('inf')), 'sigma', ValueError)])
def test_invalid_params_raise(kwargs, name, error):
  with pytest.raises(error, match=f'`{name}`'):
    qg.QuantizedGaussian(**dict(PARAMS[0], **kwargs))


@pytest.mark.parametrize('params', [p for p in PARAMS if not p.get('lattice')])
def test_local_bound_holds(params):
  """α t²/(2σ²) bounds the secure sum for any others (data processing)."""
  mech = qg.QuantizedGaussian(**params)
  checks.assert_local_bound_holds(mech)
  bound = mech.local_divergences([2.0, math.inf], [0.1, 0.5])
  np.testing.assert_allclose(bound[2.0], 2 * np.array([0.1, 0.5])**2 /
                             (2 * params['sigma']**2))
  assert np.all(np.isinf(bound[math.inf]))


@pytest.mark.parametrize('params', [p for p in PARAMS if p.get('lattice')])
def test_lattice_local_bound_holds_and_is_the_chord_between_multiples(params):
  """The lattice variant's one-client bound (the Gaussian's chord in
  exp((α-1)·) between lattice multiples, by coupling the roundings) holds at
  random pairs with 0 or 2 others, equals α t²/(2σ²) at lattice multiples,
  lies above it between them, and is non-decreasing in t."""
  mech = qg.QuantizedGaussian(**params)
  checks.assert_local_bound_holds(mech)
  h = 2 * mech.input_bound / (mech.lattice - 1)
  sigma = params['sigma']
  at = mech.local_divergences([2.0], [h, 2 * h])[2.0]
  np.testing.assert_allclose(at, 2 * np.array([h, 2 * h])**2 / (2 * sigma**2))
  ts = np.linspace(0, 2 * mech.input_bound, 101)
  for a in (1.0, 2.0, 8.0):
    bound = mech.local_divergences([a], ts)[a]
    assert np.all(bound >= a * ts**2 / (2 * sigma**2) * (1 - 1e-12))
    assert np.all(np.diff(bound) >= -1e-12)
  # At t < h, where α t²/(2σ²) fails (below), exactly and at random pairs.
  t = h / 5
  exact = divergence.renyi_divergence(mech.log_pmf(t), mech.log_pmf(0.0), 2.0)
  assert exact <= mech.local_divergences([2.0], [t])[2.0][0] * (1 + 1e-9)


def test_lattice_law_is_the_mixture_of_the_papers_laws_at_lattice_points():
  """L points on [-c, c]: the law at x is (1-w)·law(b_i) + w·law(b_{i+1}),
  affine between lattice points (the vertices, `lattice_log_pmfs`),
  continuous, and L = 0 is the paper's law; the registry default is the
  lattice variant."""
  mech = qg.QuantizedGaussian(clip=2.0, num_levels=16, sigma=0.4,
                              input_bound=0.5, lattice=5)
  paper = qg.QuantizedGaussian(clip=2.0, num_levels=16, sigma=0.4,
                               input_bound=0.5)
  np.testing.assert_allclose(mech.critical_inputs(), [-.5, -.25, 0, .25, .5])
  assert mech.piecewise_affine and not paper.piecewise_affine
  assert mech.has_local_bound and paper.has_local_bound
  assert (mech.local_divergences([2.0], [0.1])[2.0] >
          paper.local_divergences([2.0], [0.1])[2.0])
  for x in (-0.5, 0.0, 0.25):   # on the lattice: the paper's law
    np.testing.assert_allclose(mech.pmf(x), paper.pmf(x), rtol=1e-12)
  # The vertex laws, as `lattice_log_pmfs` lists them (the blanket's rows).
  np.testing.assert_allclose(
      mech.lattice_log_pmfs(),
      [paper.log_pmf(v) for v in (-0.5, -0.25, 0.0, 0.25, 0.5)], rtol=1e-13)
  with pytest.raises(ValueError, match='lattice'):
    paper.lattice_log_pmfs()
  x, w = 0.1, 0.4   # 0.1 = 0 + 0.4·0.25
  np.testing.assert_allclose(mech.pmf(x),
                             0.6 * paper.pmf(0.0) + 0.4 * paper.pmf(0.25),
                             rtol=1e-12)
  # Lattice rounding is unbiased: the mean level moves as the paper's does
  # between lattice points (affine), and equals it at them.
  mean = lambda m, y: float(np.dot(m.pmf(y), m.levels))
  assert mean(mech, 0.1) == pytest.approx(0.6 * mean(paper, 0.0) +
                                          0.4 * mean(paper, 0.25), rel=1e-12)
  built = qg.QuantizedGaussian.for_coordinate_bound(0.5, noise_multiplier=0.4,
                                                    range_ratio=4.0)
  assert built.params() == dict(clip=2.0, num_levels=16, sigma=0.4,
                                input_bound=0.5, lattice=9)
  np.testing.assert_allclose(qg.QuantizedGaussian(**built.params()).pmf(0.3),
                             built.pmf(0.3), rtol=0)


def test_the_gaussian_one_client_bound_fails_for_the_lattice_mixture():
  """Why the lattice variant takes the chord, not α t²/(2σ²): at t < h the
  mixture's D_2 exceeds 2t²/(2σ²) (module docstring), here computed
  exactly."""
  mech = qg.QuantizedGaussian(clip=4.0, num_levels=256, sigma=0.3,
                              input_bound=1.0, lattice=3)
  t = 0.05
  exact = divergence.renyi_divergence(mech.log_pmf(t), mech.log_pmf(0.0), 2.0)
  assert exact > 2.0 * t**2 / (2 * 0.3**2)


@pytest.mark.parametrize('kwargs, name', [
    (dict(lattice=1), 'lattice'), (dict(lattice=-2), 'lattice'),
    (dict(input_bound=3.0), 'input_bound'), (dict(input_bound=0.0), 'input_bound')])
def test_invalid_lattice_and_input_bound_raise(kwargs, name):
  with pytest.raises(ValueError, match=f'`{name}`'):
    qg.QuantizedGaussian(**dict(PARAMS[0], **kwargs))


def edge_mechanisms(c):
  """The quantized Gaussian at clip c, saturating at the top level (Cq = c,
  σ = 1e-3c): a float32 t = (Cq + Cq)/step rounded to level k (k = 2^16:
  1.9e-3 of the draws at c = 0.0331; k = 1023: 5.9e-5; k = 16 as the issue
  measured), and the registry's lattice (contract_test.py)."""
  return [qg.QuantizedGaussian(c, 1023, 1e-3 * c, c, 0),
          qg.QuantizedGaussian(c, 16, 1e-3 * c, c, 0),
          qg.QuantizedGaussian(2 * c, 16, 0.5 * c, c, 9)]


C_SERVED = 0.03314563036811941   # 3/√8192, the served cells' c∞


def _exact_paper_pmf(mech, x):
  """Lemma 2 in mpmath at the working precision: each hat side in closed
  form, ∫_a^b (z - a)φ = φ(a) - φ(b) - a(Φ(b) - Φ(a)), Φ's difference taken
  on the tail side; saturation Φ(z_0), Φ(-z_{k-1}). Levels -Cq + r·2Cq/(k-1)."""
  k = mech.num_levels
  cq, s, x = mpmath.mpf(mech.clip), mpmath.mpf(mech.sigma), mpmath.mpf(x)
  step = 2 * cq / (k - 1)
  z = [(-cq + r * step - x) / s for r in range(k)]
  width = step / s
  phi = [mpmath.npdf(v) for v in z]
  out = [mpmath.mpf(0)] * k
  for r in range(k - 1):
    a, b = z[r], z[r + 1]
    mass = (mpmath.ncdf(-a) - mpmath.ncdf(-b) if a + b > 0
            else mpmath.ncdf(b) - mpmath.ncdf(a))
    first = phi[r] - phi[r + 1]
    out[r + 1] += (first - a * mass) / width   # level r+1's rise
    out[r] += (b * mass - first) / width       # level r's fall
  out[0] += mpmath.ncdf(z[0])
  out[-1] += mpmath.ncdf(-z[-1])
  return out


def _exact_log_pmf(mech, x):
  """log-law of x at 80 digits (the hats' differences cancel up to ~20),
  mixed over the lattice as the code does (`exact_lattice_log_pmf`)."""
  def at(v):
    with mpmath.workdps(80):
      return [mpmath.log(p) for p in _exact_paper_pmf(mech, v)]
  return checks.exact_lattice_log_pmf(mech, x, at, 80)


@pytest.mark.parametrize('params', [
    # The served cells (results/served_cells): 4 bits and 8 bits, ε = 10.
    dict(clip=0.5303300858899106, num_levels=16, sigma=0.14610481154077495,
         input_bound=C_SERVED, lattice=9),
    dict(clip=1.0606601717798212, num_levels=256, sigma=0.1473531937470423,
         input_bound=C_SERVED, lattice=9),
    # No lattice, two levels, another lattice.
    dict(clip=1.0, num_levels=8, sigma=0.3),
    dict(clip=1.0, num_levels=2, sigma=1.0),
    dict(clip=2.0, num_levels=16, sigma=0.4, input_bound=0.25, lattice=5),
    # Extreme noise: σ ≪ the levels (log P to -1e6, and to -2e8 with the
    # input at the levels' end), σ ≫ them, and hats 2e-3σ wide (the previous
    # integrator erred by 4.5e-13 there).
    dict(clip=1.0, num_levels=16, sigma=1e-3),
    dict(clip=1.0, num_levels=1000, sigma=1e-4, input_bound=1.0),
    dict(clip=1.0, num_levels=16, sigma=100.0),
    dict(clip=1.0, num_levels=4096, sigma=0.5)])
def test_log_pmf_within_its_proved_error(params):
  """`log_pmf_error` bounds the computed log-pmf against 80-digit mpmath at
  ±c, 0, the lattice points and off-lattice inputs; the bound is within
  10^3 of the largest error measured (a check on its tightness)."""
  mech = qg.QuantizedGaussian(**params)
  c = mech.input_bound
  rng = np.random.default_rng(0)
  xs = np.concatenate([[-c, c, 0.0, 0.37 * c], rng.uniform(-c, c, 2)])
  if mech.num_levels > 300:   # mpmath's cost grows with the levels
    xs = xs[[0, 3]]
  checks.assert_log_pmf_within_error(
      mech, lambda x: _exact_log_pmf(mech, x), xs)


@pytest.mark.parametrize('params', [
    dict(clip=1.0, num_levels=2, sigma=1.6e-12),      # R = 9.4e11
    dict(clip=1.0, num_levels=2**24, sigma=1e90)])    # hats 1.2e-97 wide
def test_log_pmf_error_finite_at_the_ends_of_its_range(params):
  """η is finite and positive at the ends of the range it covers (large at
  small σ: the law's log values reach -5e23 there, and one rounding of
  them is 6e7)."""
  eta = qg.QuantizedGaussian(**params).log_pmf_error
  assert 0 < eta and math.isfinite(eta)


@pytest.mark.parametrize('sigma', [1e-13, 1e100])
def test_log_pmf_error_refused_outside_its_range(sigma):
  with pytest.raises(ValueError, match='`sigma`'):
    qg.QuantizedGaussian(clip=1.0, num_levels=2**24, sigma=sigma).log_pmf_error


def test_gauss_legendre_rule_correctly_rounded():
  """The rule the integrator uses (τ_j = 1 + t_j on [0, 2], ω_j) is the
  exact 24-point Gauss-Legendre rule correctly rounded (within u relative),
  entry by entry (40-digit mpmath: its Legendre polynomial's roots from the
  float nodes)."""
  u = 2.0**-53
  with mpmath.workdps(40):
    for tau, omega in zip(qg._TAU, qg._OMEGA):   # pylint: disable=protected-access
      node = mpmath.findroot(lambda t: mpmath.legendre(24, t),
                             mpmath.mpf(tau) - 1)
      slope = mpmath.diff(lambda t: mpmath.legendre(24, t), node)
      weight = 2 / ((1 - node**2) * slope**2)
      assert abs((mpmath.mpf(tau) - (1 + node)) / (1 + node)) <= u * (1 + 1e-6)
      assert abs((mpmath.mpf(omega) - weight) / weight) <= u * (1 + 1e-6)
