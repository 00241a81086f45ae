import itertools
import math

import numpy as np
import pytest
from scipy import stats

from tff_quant import mechanisms
from tff_quant.accounting import blanket_domination as B
from tff_quant.accounting import composition as C
from tff_quant.accounting import gaussian_domination as G
from tests.accounting import population


def _qg(levels, sigma, lattice=9):
  return mechanisms.QuantizedGaussian(2.0, levels, sigma, input_bound=1.0,
                                      lattice=lattice)


def _rp(bits, sigma, q=0.9, lattice=9):
  return mechanisms.RandomizedProjection(2.0, bits, q, sigma, input_bound=1.0,
                                         lattice=lattice)


def _sum_law(mech, inputs):
  law = np.ones(1)
  for x in inputs:
    law = np.convolve(law, mech.pmf(x))
  return law


def _hockey(p, q, eps):
  """max over both orders of Σ (P − e^ε Q)₊ at each ε."""
  eps = np.asarray(eps, np.float64)[:, None]
  return np.maximum(np.maximum(p - np.exp(eps) * q, 0).sum(1),
                    np.maximum(q - np.exp(eps) * p, 0).sum(1))


def _gauss_delta(mu, eps):
  """δ of G_μ at ε (Dong, Roth, Su 2022, Cor. 2.13), float64."""
  eps = np.asarray(eps, np.float64)
  if mu == 0:
    return np.zeros_like(eps)
  return (stats.norm.cdf(-eps / mu + mu / 2) -
          np.exp(eps) * stats.norm.cdf(-eps / mu - mu / 2))


def _mixture_bound(rate, delta_x, eps):
  """Step B's bound: E over the blanket count of δ_G(ε; κ_{g(M)}Δ + s)."""
  kappas = np.sqrt(rate.squares)
  return sum(w * _gauss_delta(k * delta_x + rate.slack, eps)
             for w, k in zip(rate.weights_high, kappas))


_MECHS = {'qg4': _qg(4, 2.0), 'qg8': _qg(8, 3.0), 'rp2': _rp(2, 2.0),
          'rp3': _rp(3, 2.5, q=0.8)}


# --- Steps A and B: each coordinate's pair, for any inputs of the others.

@pytest.mark.parametrize('name', sorted(_MECHS))
@pytest.mark.parametrize('n', [1, 2, 3])
def test_mixture_bounds_every_pair_of_any_others(name, n):
  """Brute force over the others (lattice points, interior, mixed) and the
  target's pairs (vertex, interior, across cells, end to end): the exact
  hockey-stick of the n-client sum, both orders, never exceeds the mixture
  of Gaussian profiles over the blanket count, and comes within 25% of it
  somewhere (a test that can fail)."""
  mech = _MECHS[name]
  rate = B.rate(mech, n)
  assert isinstance(rate, B.MixtureRate)
  grid = (-1.0, -0.75, -0.3, 0.0, 0.55, 1.0)
  others_sets = list(itertools.combinations_with_replacement(grid, n - 1))
  rng = np.random.default_rng(11 + n)
  others_sets += [tuple(rng.uniform(-1, 1, n - 1)) for _ in range(6)]
  pairs = [(1.0, -1.0), (0.0, 0.25), (0.25, 0.0), (-0.8, -0.7),
           (0.55, -0.2), (1.0, 0.999)]
  eps = np.linspace(0.0, 3.0, 31)
  worst = 0.0
  for others in others_sets:
    for x, x2 in pairs:
      p, q = (_sum_law(mech, others + (v,)) for v in (x, x2))
      exact = _hockey(p, q, eps)
      bound = _mixture_bound(rate, abs(x - x2), eps)
      assert np.all(exact <= bound + 1e-12), (others, x, x2)
      keep = bound > 1e-6
      worst = max(worst, float(np.max(exact[keep] / bound[keep])))
  assert worst > 0.75


@pytest.mark.parametrize('name', sorted(_MECHS))
def test_single_client_rate_is_the_kink_formulas_local_supremum(name):
  """With no other client (count 0) the rate bounds μ* of every pair of
  inputs (the kink formula, `gaussian_domination.tradeoff_mu`) and is
  reached within 0.1% by a small step at some vertex (the bound is the
  supremum of local rates)."""
  mech = _MECHS[name]
  rate = B.rate(mech, 1)
  kappa = math.sqrt(rate.squares[0])
  xs = np.linspace(-1, 1, 41)
  for x, x2 in itertools.combinations(xs, 2):
    mu = G.tradeoff_mu(mech.pmf(x), mech.pmf(x2))
    assert mu <= kappa * abs(x - x2) + rate.slack + 1e-12
  local = max(G.tradeoff_mu(mech.pmf(v), mech.pmf(v + s * 1e-4)) / 1e-4
              for v in mech.critical_inputs() for s in (-1, 1)
              if -1 <= v + s * 1e-4 <= 1)
  assert local == pytest.approx(kappa, rel=1e-3)


# --- Step C and the whole route: a tiny population, every cohort.

@pytest.mark.parametrize('name', ['qg4', 'rp2'])
def test_route_holds_against_every_cohort_of_a_tiny_population(name):
  """N = 6, replace-one, cohorts of 2, 3 rounds, two coordinates on the ℓ2 route:
  targets on the ℓ2 sphere and interior, the others interior and mixed.
  The accountant's profile route, where the blanket mixture is below the
  RDP curve's profile (checked; with cohorts of 3, or 2 rounds, it is not
  at these parameters), is at or above the exact ε of every run."""
  mech, total, delta, cohort, rounds = _MECHS[name], 6, 1e-3, 2, 3
  acc = C.RoundAccountant(mech, cohort, total, delta, dim=2, l2_clip=1.0)
  assert isinstance(acc.dominating_rate, B.MixtureRate)
  population.check_l2_route(acc, rounds)


def test_round_mu_concentrates_over_many_coordinates():
  """At the frontier's calibrated quantized Gaussian (16 levels, d = 61,706,
  n = 100, ℓ2 route S = 2): μ' is within 2% of the Gaussian approximation's
  κ_ideal·S (the Fisher rate of the sum) and below κ at count 0 times S by
  far; with one effective coordinate it is at most κ_max·S (no gain, no
  loss)."""
  c = 0.00805
  mech = mechanisms.QuantizedGaussian.for_coordinate_bound(
      c, num_levels=16, range_ratio=128, noise_multiplier=30.05)
  rate = B.rate(mech, 100)
  levels = np.arange(16)
  p0, p1 = mech.pmf(0.0), mech.pmf(c / 4)
  mean0 = p0 @ levels
  ideal = (p1 @ levels - mean0) / (c / 4) / math.sqrt(
      100 * (p0 @ (levels - mean0)**2))
  mu = rate.round_mu(2.0, 61706)
  assert 1.0 < mu / (ideal * 2.0) < 1.02
  assert rate.rate / ideal == pytest.approx(1.0064, abs=1e-3)
  one = rate.round_mu(2 * c, 1)
  assert one <= math.sqrt(max(rate.squares)) * 2 * c * (1 + 1e-12) + (
      rate.slack)


def test_two_levels_take_the_closed_form_and_the_rest_say_why():
  two = _qg(2, 2.0)
  assert B.rate(two, 3) == G.rate(two, 3)
  assert B.unavailable(two, 3) == ''
  flat = _qg(4, 2.0, lattice=0)
  assert B.rate(flat, 3) is None
  assert 'without the input lattice' in B.unavailable(flat, 3)
  wide = mechanisms.QuantizedGaussian.for_coordinate_bound(
      0.01, num_levels=256, range_ratio=256, noise_multiplier=20.0)
  assert 'MAX_TERMS' in B.unavailable(wide, 1000)
  assert B.rate(wide, 1000) is None
  other = mechanisms.PBM(1.0, 4, 0.5)   # PBM's own reason
  assert B.unavailable(other, 3) == G.unavailable(other, 3)
  with pytest.raises(ValueError, match='num_clients'):
    B.rate(two, 0)


def test_rates_never_rise_with_the_count():
  """κ(R^{*m}) bounds every count above m (data processing), so the rates
  used are non-increasing in the count even where the computed ones are not
  (nearly deterministic laws: the clusters' least outcome dominates)."""
  for mech, n in ((_qg(4, 0.15), 3), (_MECHS['rp3'], 3), (_MECHS['qg8'], 40)):
    squares = np.asarray(B.rate(mech, n).squares)
    assert np.all(np.diff(squares) <= 0)
    assert np.all(np.isfinite(squares))
