import math

import mpmath
import numpy as np
import pytest
from scipy import stats

from tff_quant import mechanisms
from tff_quant.accounting import composition as C
from tff_quant.accounting import gaussian_domination as G
from tff_quant.accounting import profile_route as P
from tests.accounting import population


def _hockey(p, q, eps):
  eps = np.asarray(eps, np.float64)
  return np.maximum(p[None, :] - np.exp(eps)[:, None] * q[None, :], 0).sum(1)


def _gauss_hockey(mu, eps):
  """H_{e^ε}(N(μ,1) ‖ N(0,1)), Balle & Wang 2018 Thm 8 (float64)."""
  eps = np.asarray(eps, np.float64)
  return (stats.norm.cdf(mu / 2 - eps / mu) -
          np.exp(eps) * stats.norm.cdf(-mu / 2 - eps / mu))


def _sum_law(mech, inputs):
  law = np.ones(1)
  for x in inputs:
    law = np.convolve(law, mech.pmf(x))
  return law


# --- tradeoff_mu: the kink formula against the hockey-stick definition.

def test_tradeoff_mu_is_the_least_dominating_gaussian():
  """T(P, Q) >= G_μ ⇔ H_{e^ε}(P‖Q) <= the Gaussian's at every ε, both
  orders: at μ* every ε holds (up to float), at 0.98·μ* some ε fails."""
  rng = np.random.default_rng(0)
  for _ in range(40):
    p, q = rng.dirichlet(np.ones(5)), rng.dirichlet(np.ones(5))
    mu = G.tradeoff_mu(p, q)
    # ε >= 0 in both orders covers every ε (H_{e^ε} = 1 − e^ε + e^ε·H_{e^-ε}).
    eps = np.linspace(0, mu * mu + 4 * mu, 4001)
    for a, b in ((p, q), (q, p)):
      assert np.all(_hockey(a, b, eps) <= _gauss_hockey(mu, eps) + 1e-12)
    worst = max(np.max(_hockey(a, b, eps) - _gauss_hockey(0.98 * mu, eps))
                for a, b in ((p, q), (q, p)))
    assert worst > 0


def test_tradeoff_mu_is_infinite_where_supports_differ():
  assert G.tradeoff_mu([0.0, 1.0], [0.5, 0.5]) == math.inf
  assert G.tradeoff_mu([0.5, 0.5], [1.0, 0.0]) == math.inf
  assert G.tradeoff_mu([0.3, 0.7], [0.3, 0.7]) == 0.0
  with pytest.raises(ValueError, match='same shape'):
    G.tradeoff_mu([1.0], [0.5, 0.5])
  with pytest.raises(ValueError, match='finite and >= 0'):
    G.tradeoff_mu([1.5, -0.5], [0.5, 0.5])


# --- pbm_trial_rate: sound for actual inputs, and the family's supremum.

@pytest.mark.parametrize('n', [1, 2, 3, 5])
@pytest.mark.parametrize('theta', [0.01, 0.2, 0.45])
def test_trial_rate_bounds_pairs_of_any_inputs(n, theta):
  """Random interior target positions and shifts, others interior, at the
  ends and mixed (not the family the proof reduces to): μ* <= κ₁Δ for the
  one-trial sum, and <= √(m−1)·κ₁Δ for 4 and 8 levels."""
  rng = np.random.default_rng(n * 100 + int(theta * 100))
  kappa = G.pbm_trial_rate(theta, 1.0, n)
  most = 0.0
  for levels in (2, 4, 8):
    mech = mechanisms.PBM(1.0, levels, theta)
    rate = math.sqrt(levels - 1) * kappa
    for trial in range(60):
      delta = rng.uniform(1e-3, 2.0) if trial % 3 else 2.0 * rng.uniform() ** 4
      x = rng.uniform(-1 + delta, 1)
      others = rng.choice([-1.0, 1.0, rng.uniform(-1, 1)], size=n - 1)
      base = _sum_law(mech, others)
      p = np.convolve(base, mech.pmf(x))
      q = np.convolve(base, mech.pmf(x - delta))
      ratio = G.tradeoff_mu(p, q) / (rate * delta)
      most = max(most, ratio)
      assert ratio <= 1 + 1e-9
  assert most > 0.25   # the bound is not vacuous on these pairs


@pytest.mark.parametrize('n, theta', [(1, 0.3), (4, 0.1), (30, 0.02)])
def test_trial_rate_is_the_supremum_of_the_worst_family(n, theta):
  """The closed form (η -> 0 and η = 1 per prefix) against the family's μ*
  (K others at +c, the rest at −c; target top pair, and its mirror) on a
  dense grid of shifts: at or above every point, and reached within 1e-6."""
  kappa = G.pbm_trial_rate(theta, 1.0, n)
  mech = mechanisms.PBM(1.0, 2, theta)
  grid = 0.0
  for k in range(n):
    base = _sum_law(mech, [1.0] * k + [-1.0] * (n - 1 - k))
    for x in (1.0, -1.0):   # top pair at +c, bottom pair at −c (mirror)
      for eta in np.geomspace(1e-6, 1, 25):
        shift = 2 * eta
        x2 = x - shift if x > 0 else x + shift
        mu = G.tradeoff_mu(np.convolve(base, mech.pmf(x)),
                           np.convolve(base, mech.pmf(x2)))
        grid = max(grid, mu / shift)
  assert grid <= kappa
  assert kappa <= grid * (1 + 1e-6)


@pytest.mark.parametrize('theta, tol', [(0.05, 1e-10), (1e-7, 1e-4)])
def test_trial_rate_matches_high_precision_closed_form(theta, tol):
  """The same closed form evaluated in 40-digit arithmetic at the float
  trial probabilities: the code is at or above it (rounding carried
  outwards) and close (its certified intervals widen like 1/θ)."""
  mpmath.mp.dps = 40
  n, clip = 12, mpmath.mpf(1)
  a, b = mpmath.mpf(0.5 + theta), mpmath.mpf(0.5 - theta)

  def binom(trials, p):
    return [mpmath.binomial(trials, j) * p**j * (1 - p)**(trials - j)
            for j in range(trials + 1)]

  best = mpmath.mpf(0)
  for k in range(n):
    o = np.convolve(np.array(binom(k, a), dtype=object),
                    np.array(binom(n - 1 - k, b), dtype=object))
    for law, p, q in ((list(o), a, b), (list(o[::-1]), 1 - b, 1 - a)):
      for j in range(n):
        p_k = sum(law[:j]) + (1 - p) * law[j]
        d_k = (p - q) * law[j]
        z = mpmath.sqrt(2) * mpmath.erfinv(2 * p_k - 1)
        slope = d_k / (mpmath.exp(-z * z / 2) / mpmath.sqrt(2 * mpmath.pi))
        end = mpmath.sqrt(2) * mpmath.erfinv(2 * (p_k + d_k) - 1) - z
        best = max(best, slope, end)
  exact = float(best / (2 * clip))
  code = G.pbm_trial_rate(theta, 1.0, n)
  assert exact <= code <= exact * (1 + tol)


def test_trial_rate_is_near_the_fisher_value_at_the_frontier():
  """d = 61,706, 2 levels at c = 2/√d, 100 clients: κ₁ within 0.4% of the
  sum's Fisher information per unit shift, (θ/c)/√(n·a·b)."""
  clip, theta, n = 2 / math.sqrt(61706), 0.0040029, 100
  fisher = (theta / clip) / math.sqrt(n * (0.5 + theta) * (0.5 - theta))
  assert 1.0 < G.pbm_trial_rate(theta, clip, n) / fisher < 1.004


# --- RQM at two levels: PBM's law, so PBM's rate.

@pytest.mark.parametrize('delta', [0.01, 1.0, 30.0])
def test_rqm_at_two_levels_is_the_one_trial_pbm_at_theta_c_over_2x(delta):
  """The reduction's content, from RQM's own pmf (Lemma 5.1's code): at
  every input its law is PBM's at θ = c/(2X); the rate is PBM's."""
  rqm = mechanisms.RQM(1.0, delta, 2, 0.3)
  same = mechanisms.PBM(1.0, 2, 1.0 / (2 * (1.0 + delta)))
  for x in np.linspace(-1, 1, 41):
    np.testing.assert_allclose(rqm.pmf(x), same.pmf(x), rtol=1e-12,
                               atol=1e-15)
  rate = G.rate(rqm, 20)
  assert rate.rate == pytest.approx(G.rate(same, 20).rate, rel=1e-12)
  assert rate.slack == pytest.approx(G.rate(same, 20).slack, rel=1e-9)
  assert 'rqm in its central bin' in rate.why and G.unavailable(rqm, 20) == ''


def _most_over_bound(mech, n, rate, seed, trials=60):
  """max μ*/(κΔ + s) over random pairs of `mech`'s n-client sums: targets
  and shifts random, others interior, at the ends and mixed (asserted <= 1
  up to float)."""
  rng = np.random.default_rng(seed)
  most = 0.0
  for trial in range(trials):
    delta = rng.uniform(1e-3, 2.0) if trial % 3 else 2.0 * rng.uniform() ** 4
    x = rng.uniform(-1 + delta, 1)
    others = rng.choice([-1.0, 1.0, rng.uniform(-1, 1)], size=n - 1)
    base = _sum_law(mech, others)
    mu = G.tradeoff_mu(np.convolve(base, mech.pmf(x)),
                       np.convolve(base, mech.pmf(x - delta)))
    bound = rate.rate * delta + rate.slack
    assert mu <= bound * (1 + 1e-9)
    most = max(most, mu / bound)
  return most


@pytest.mark.parametrize('n', [1, 3, 6])
@pytest.mark.parametrize('levels, delta, q, least', [
    (2, 0.5, 0.42, 0.25), (4, 3.0, 0.95, 0.25), (8, 19.0, 0.3, 0.02)])
def test_rqm_rate_bounds_pairs_of_any_inputs(n, levels, delta, q, least):
  """Soundness on RQM's own laws (2 levels, and 4 and 8 with [−c, c] in the
  central bin): μ* <= κΔ + s for the n-client sum; the dropped levels'
  noise is not counted, so at q = 0.3 the bound is loose."""
  rqm = mechanisms.RQM(1.0, delta, levels, q)
  most = _most_over_bound(rqm, n, G.rate(rqm, n), 7 + n + levels, trials=60)
  assert most > least


@pytest.mark.parametrize('delta', [1e-16, 4e-15])   # X = c: θ = ½; θ ≈ ½
def test_rqm_with_theta_at_half_has_no_rate_and_says_why(delta):
  rqm = mechanisms.RQM(1.0, delta, 2, 0.3)
  assert G.rate(rqm, 10) is None
  assert 'not inside its central bin' in G.unavailable(rqm, 10)


# --- QMGeo in its central bin: a walk after one trial.

def _qmgeo(levels, ratio, p=0.6, full_support=True):
  return mechanisms.QMGeo(1.0, levels, p, full_support=full_support,
                          level_range=ratio)


@pytest.mark.parametrize('mech', [
    _qmgeo(8, 20.0, full_support=True), _qmgeo(8, 20.0, full_support=False),
    mechanisms.RQM(1.0, 19.0, 8, 0.3), mechanisms.RQM(1.0, 3.0, 4, 0.9)],
                         ids=['qmgeo', 'qmgeo_as_written', 'rqm8', 'rqm4'])
def test_central_bin_law_is_one_trial_then_input_free_noise(mech):
  """From the mechanism's own pmf (RQM: Lemma 5.1's code): at every input
  its law is (1 − λ)·p_u + λ·p_v with λ = ½ + x/h and p_u, p_v laws that
  no input moves (recovered from ±c), so the n-client sum is
  Σ_K P(K)·p_v^{*K} * p_u^{*(n−K)}, K the count of successes: a randomized
  function of the one-trial PBM sum at θ = c/h."""
  h = mech.level_step
  low, up = mech.pmf(-1.0), mech.pmf(1.0)
  lam_low, lam_up = 0.5 - 1.0 / h, 0.5 + 1.0 / h
  p_v = (up * (1 - lam_low) - low * (1 - lam_up)) / (lam_up - lam_low)
  p_u = (low - lam_low * p_v) / (1 - lam_low)
  for law in (p_u, p_v):   # laws: no negative mass, total 1
    assert np.all(law >= -1e-14) and abs(law.sum() - 1) < 1e-12
  for x in np.linspace(-1, 1, 17):
    lam = 0.5 + x / h
    np.testing.assert_allclose(mech.pmf(x), (1 - lam) * p_u + lam * p_v,
                               rtol=1e-9, atol=1e-14)
  rng = np.random.default_rng(3)
  inputs = rng.uniform(-1, 1, size=4)
  count = _sum_law(mechanisms.PBM(1.0, 2, 1.0 / h), inputs)
  mixed = sum(count[k] * _sum_law_of([p_v] * k + [p_u] * (4 - k))
              for k in range(5))
  np.testing.assert_allclose(_sum_law(mech, inputs), mixed, rtol=1e-9,
                             atol=1e-14)
  rate = G.rate(mech, 4)
  assert rate.rate == pytest.approx(
      G.rate(mechanisms.PBM(1.0, 2, 1.0 / h), 4).rate, rel=1e-12)
  assert 'central bin' in rate.why


def _sum_law_of(laws):
  law = np.ones(1)
  for one in laws:
    law = np.convolve(law, one)
  return law


@pytest.mark.parametrize('n', [1, 3, 5])
@pytest.mark.parametrize('full_support', [True, False])
def test_qmgeo_rate_bounds_pairs_of_any_inputs(n, full_support):
  """Soundness on QMGeo's own laws (4 levels, W = 20c): μ* <= κΔ + s; the
  walk's noise is not counted, so the bound is looser than PBM's."""
  mech = _qmgeo(4, 20.0, p=0.7, full_support=full_support)
  most = _most_over_bound(mech, n, G.rate(mech, n), 11 * n + full_support)
  assert most > 0.05


def test_qmgeo_rate_is_the_one_trial_pbm_at_c_over_h_whatever_p():
  rates = [G.rate(_qmgeo(16, 64.0, p=p), 100) for p in (0.1, 0.5, 0.99)]
  one_trial = G.rate(mechanisms.PBM(1.0, 2, 1.0 / _qmgeo(16, 64.0).level_step),
                     100)
  for r in rates:
    assert r.rate == pytest.approx(one_trial.rate, rel=1e-12)
    assert 'qmgeo in its central bin' in r.why
  assert rates[0].slack > one_trial.slack   # t's extent is R − 1, not 1


@pytest.mark.parametrize('mech, why', [
    (_qmgeo(5, 40.0), 'odd number of levels'),
    (_qmgeo(8, 6.0), 'a level inside'),          # h/2 = 6/7 < c
    (_qmgeo(4, 1.0), 'a level inside'),          # the paper's W = c
    (mechanisms.RQM(1.0, 30.0, 7, 0.5), 'odd number of levels'),
    (mechanisms.RQM(1.0, 1.0, 4, 0.3), 'a level inside')])   # h/2 = 2/3
def test_outside_one_bin_there_is_no_rate_and_the_reason(mech, why):
  assert G.rate(mech, 10) is None
  assert why in G.unavailable(mech, 10)


def test_rate_covers_pbm_only_where_proved():
  pbm = mechanisms.PBM(1.0, 16, 0.1)
  rate = G.rate(pbm, 10)
  assert rate.rate == pytest.approx(math.sqrt(15) *
                                    G.pbm_trial_rate(0.1, 1.0, 10), rel=1e-12)
  assert rate.rate > math.sqrt(15) * G.pbm_trial_rate(0.1, 1.0, 10)
  # The float laws' slack: below 1e-10 of μ at d = 10^6, c = 1, ‖Δ‖ = 2.
  assert 0 < rate.slack * 1e3 < 1e-10 * rate.rate * 2
  assert 'Gaussian domination' in rate.why
  assert G.rate(mechanisms.PBM(1.0, 4, 0.5), 10) is None   # D∞ = inf
  assert G.rate(pbm, G.MAX_CLIENTS + 1) is None
  assert G.rate(mechanisms.RQM(1.0, 1.0, 4, 0.3), 10) is None   # h/2 < c
  assert G.rate(mechanisms.QuantizedGaussian(1.0, 4, 0.5), 10) is None
  assert G.unavailable(pbm, 10) == ''
  assert 'rqm' in G.unavailable(mechanisms.RQM(1.0, 1.0, 4, 0.3), 10)
  assert str(G.MAX_CLIENTS) in G.unavailable(pbm, G.MAX_CLIENTS + 1)
  assert '0 or 1' in G.unavailable(mechanisms.PBM(1.0, 4, 0.5), 10)
  for args, name in (((0.5, 1.0, 3), 'theta'), ((0.1, 0.0, 3), 'clip'),
                     ((0.1, 1.0, 0), 'num_clients')):
    with pytest.raises(ValueError, match=name):
      G.pbm_trial_rate(*args)


# --- Two-level quantized Gaussian and one-bit randomized projection: a
# Bernoulli per client whose up-probability is Lipschitz, odd about ½.

def _two_level(name, lattice, sigma=4.83):
  if name == 'quantized_gaussian':
    return mechanisms.QuantizedGaussian(2.0, 2, sigma, input_bound=1.0,
                                        lattice=lattice)
  return mechanisms.RandomizedProjection(2.0, 1, 0.9, sigma, input_bound=1.0,
                                         lattice=lattice)


_SLOPES = {'quantized_gaussian': G._quantized_gaussian_slope,   # pylint: disable=protected-access
           'randomized_projection': G._projection_slope}   # pylint: disable=protected-access


@pytest.mark.parametrize('name', sorted(_SLOPES))
@pytest.mark.parametrize('lattice', [0, 9])
def test_two_level_laws_lie_in_the_family_with_the_slope_bound(name, lattice):
  """From the mechanism's own pmf (Monte Carlo-checked against its sampler
  in tests/mechanisms): two outputs, p(0) = ½, |p(x) − ½| <= β|x| and
  |p(x) − p(x')| <= β|x − x'| on a grid of 201 inputs; without the lattice
  the steepest chord reaches β within 0.1% (the bound is the slope at 0)."""
  mech = _two_level(name, lattice)
  beta = float(_SLOPES[name](mech))
  xs = np.linspace(-1, 1, 201)
  up = np.array([mech.pmf(x)[1] for x in xs])
  assert all(len(mech.pmf(x)) == 2 for x in (-1.0, 0.3))
  assert up[100] == pytest.approx(0.5, abs=1e-15)
  assert np.all(np.abs(up - 0.5) <= beta * np.abs(xs) * (1 + 1e-12) + 1e-15)
  chords = np.abs(np.diff(up)) / np.diff(xs)
  assert np.all(chords <= beta * (1 + 1e-9))
  if not lattice:
    assert chords.max() > 0.999 * beta


@pytest.mark.parametrize('name', sorted(_SLOPES))
@pytest.mark.parametrize('lattice', [0, 9])
@pytest.mark.parametrize('n', [1, 3, 6])
def test_two_level_rate_bounds_pairs_of_any_inputs(name, lattice, n):
  """Soundness on their own laws: μ* <= κΔ + s for the n-client sum, the
  others interior, at the ends and mixed; the rate is PBM's one-trial rate
  at θ = βc, and it is nearly attained (the laws are nearly affine)."""
  mech = _two_level(name, lattice, sigma=1.5)
  rate = G.rate(mech, n)
  beta = float(_SLOPES[name](mech))
  assert rate.rate == pytest.approx(
      G.pbm_trial_rate(beta, 1.0, n), rel=1e-9)
  assert f'{name} at' in rate.why
  most = _most_over_bound(mech, n, rate, 5 * n + lattice, trials=45)
  assert most > 0.5


def test_two_level_rates_refuse_where_the_law_jumps_or_ignores_the_input():
  jump = mechanisms.RandomizedProjection(2.0, 1, 0.9, 0.0, input_bound=1.0)
  assert G.rate(jump, 5) is None and 'σ = 0' in G.unavailable(jump, 5)
  flat = mechanisms.RandomizedProjection(2.0, 1, 0.5, 1.0, input_bound=1.0)
  assert G.rate(flat, 5) is None and 'slope 0' in G.unavailable(flat, 5)
  for more in (mechanisms.QuantizedGaussian(2.0, 3, 1.0, input_bound=1.0),
               mechanisms.RandomizedProjection(2.0, 2, 0.9, 1.0,
                                               input_bound=1.0)):
    assert G.rate(more, 5) is None
    assert 'not finite and small' in G.unavailable(more, 5)


# --- The whole route against a tiny population (every cohort enumerated).

# Each reduces to the one-trial PBM at θ ≈ 0.08.
_BINARY = {'pbm': mechanisms.PBM(1.0, 2, 0.08),
           'rqm2': mechanisms.RQM(1.0, 5.25, 2, 0.3),
           'qmgeo4': mechanisms.QMGeo(1.0, 4, 0.9999, full_support=True,
                                      level_range=18.75),
           'rqm4': mechanisms.RQM(1.0, 17.75, 4, 0.9999),
           # Lipschitz at β with βc = 0.080 (2-level QG) and 0.0798 (RP).
           'qg2': _two_level('quantized_gaussian', 9, sigma=4.83),
           'rp1': _two_level('randomized_projection', 9, sigma=4.0)}


@pytest.mark.parametrize('name', sorted(_BINARY))
@pytest.mark.parametrize('cohort, rounds', [(2, 3), (3, 2)])
def test_route_holds_against_every_cohort_with_the_domination_binding(
    name, cohort, rounds):
  """N = 6, replace-one, fixed-size cohorts, two coordinates on the ℓ2
  route (c = 1 > l2_clip/√2): targets on the ℓ2 sphere and interior, the
  others interior and mixed. The accountant's profile route (where the
  Gaussian domination is below the RDP curve's profile: checked) is at or
  above the exact ε of every run."""
  mech, total, delta = _BINARY[name], 6, 1e-3
  acc = C.RoundAccountant(mech, cohort, total, delta, dim=2, l2_clip=1.0)
  population.check_l2_route(acc, rounds)


def test_profile_bounds_the_round_of_every_pair_at_one_coordinate():
  """The un-sampled round (n = 3, one coordinate, every coordinate end to
  end): the dominating Gaussian's profile is above the exact hockey-stick
  of the worst pairs, and within a factor 2 of it somewhere (three trials
  of three clients are far from Gaussian: 0.70 here)."""
  mech = mechanisms.PBM(1.0, 4, 0.15)
  acc = C.RoundAccountant(mech, 3, 3, 1e-3)
  mu = acc._gaussian_mu()   # pylint: disable=protected-access
  eps = np.linspace(0, 2, 41)
  bound = P.gaussian_profile(mu, eps)
  worst = np.zeros_like(eps)
  for others in ((1.0, 1.0), (1.0, -1.0), (-1.0, -1.0), (0.2, -0.9)):
    for x, x2 in ((1.0, -1.0), (-1.0, 1.0), (0.5, -0.5)):
      p, q = (_sum_law(mech, others + (v,)) for v in (x, x2))
      worst = np.maximum(worst, _hockey(p, q, eps))
  assert np.all(worst <= bound)
  assert np.max(worst[worst > 1e-4] / bound[worst > 1e-4]) > 0.5


@pytest.mark.parametrize('mech', [
    # θ·c underflows in the family's ends (independent review's case).
    mechanisms.RQM(63 * 2.0**-1054, 2.0**-1022, 2, 0.42),
    mechanisms.RQM(2.0**-1070, 2.0**-1070, 2, 0.42),   # 1/h overflows
    mechanisms.PBM(2.0**-1070, 2, 0.25),
    # 2c overflows, so 1/(2c) rounded to a rate of 0 (independent review 3).
    mechanisms.RandomizedProjection(1.0, 1, 0.9, 8.99e307,
                                    input_bound=8.99e307),
    mechanisms.PBM(8.99e307, 2, 0.25)])
def test_clips_at_float64s_ends_have_no_rate_and_say_why(mech):
  """Where the one-trial family the rate is computed on cannot hold every
  computed trial probability (its ends underflow to ½), a reciprocal
  leaves float64 or 2c overflows, there is no rate, with the reason."""
  assert G.rate(mech, 3) is None
  assert 'Gaussian domination' in G.unavailable(mech, 3)
