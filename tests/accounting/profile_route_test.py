import itertools
import math

import mpmath
import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_mechanism as plm
from scipy import special

from tff_quant import mechanisms
from tff_quant.accounting import composition as C
from tff_quant.accounting import profile_route as P
from tests.accounting import cases, population

# The frontier's setting: 100 of 3,400 clients, 300 rounds, δ = 1/3,400.
N_, TOTAL, ROUNDS, DELTA = 100, 3400, 300, 1 / 3400
GAMMA = N_ / TOTAL


def _gaussian_rdp(mu, orders=range(2, 65)):
  return {a: a * mu * mu / 2 for a in orders}


def _hockey(p, q, eps):
  """[eps] Σ (p − e^ε q)_+ for pmfs p, q (exact up to float sums)."""
  eps = np.asarray(eps, np.float64)
  return np.maximum(p[None, :] - np.exp(eps)[:, None] * q[None, :], 0).sum(1)


# --- Each step against exact values.

def test_rdp_profile_bounds_the_hockey_stick_of_every_pair_it_describes():
  """CKS20 Prop. 12, per ordered pair: random small pmfs, their exact Rényi
  divergences, the exact hockey-stick divergence below the bound."""
  rng = np.random.default_rng(0)
  eps = np.linspace(0, 4, 81)
  tight = 0.0
  for _ in range(50):
    p, q = rng.dirichlet(np.ones(6)), rng.dirichlet(np.ones(6))
    rdp = {a: special.logsumexp(a * np.log(p) + (1 - a) * np.log(q)) / (a - 1)
           for a in range(2, 40)}
    rdp[math.inf] = float(np.max(np.log(p / q)))
    bound, exact = P.rdp_profile(rdp, eps), _hockey(p, q, eps)
    assert np.all(exact <= bound)
    tight = max(tight, float(np.max(exact / np.maximum(bound, 1e-300))))
    assert np.all(bound[eps >= rdp[math.inf] * (1 + 1e-12)] == 0)
  assert tight > 0.3   # not vacuous: some pair comes within 3.3x of it


@pytest.mark.parametrize('mu', [0.05, 0.5, 2.0, 8.0])
def test_gaussian_profile_is_at_or_above_the_high_precision_value(mu):
  """Balle & Wang 2018 Thm 8 against 50-digit mpmath: never below, and
  within 1e-9 relative wherever the value is above 1e-300 and not
  cancelled (ε up to where δ drops below 1e-12 of its first term)."""
  mpmath.mp.dps = 50
  eps = np.concatenate([np.linspace(0, 3, 31), [5.0, 10.0, 20.0]])
  got = P.gaussian_profile(mu, eps)
  for e, g in zip(eps, got):
    m, x = mpmath.mpf(mu), mpmath.mpf(float(e))
    first = mpmath.ncdf(m / 2 - x / m)
    exact = first - mpmath.e**x * mpmath.ncdf(-m / 2 - x / m)
    assert g >= exact
    if exact > 1e-12 * first and exact > 1e-300:
      assert g <= exact * (1 + 1e-9) + 1e-300


def test_subsampled_gaussian_is_the_poisson_remove_side_above_zero():
  """For ε' >= 0, g(ε') = γ·δ_N(log(1 + (e^ε' − 1)/γ)) is the profile of
  ((1−γ)N(0) + γN(μ), N(0)) (BBG18 Thm 2 with equality for this pair):
  dp-accounting's exact value for the Poisson remove side; the composed
  route's one-round PLD is above it by no more than its grid's rounding."""
  mu = 0.5
  eps = np.linspace(0, 1.5, 31)
  exact = np.array([plm.GaussianPrivacyLoss(
      1.0, sensitivity=mu, sampling_prob=GAMMA,
      adjacency_type=plm.AdjacencyType.REMOVE).get_delta_for_epsilon(e)
                    for e in eps])
  profile = lambda e: P.gaussian_profile(mu, e)
  g = P.subsampled_profile(profile, GAMMA, eps)
  np.testing.assert_allclose(g, exact, rtol=1e-9, atol=1e-15)
  pld = P.dominating_pld(profile, GAMMA, DELTA, ROUNDS, 1e-4)
  one = np.asarray(pld.get_delta_for_epsilon(list(eps)))
  assert np.all(one >= exact * (1 - 1e-12))
  assert np.all(one <= exact + 2e-6)


@pytest.mark.parametrize('orders', [None, range(2, 65), (2, 3, 5, 9, 17, 33, 64)])
def test_dominating_pld_lies_above_the_profile_below_it(orders):
  """The one-round PLD's hockey-stick divergence, at and between grid
  points, on both sides of ε = 0, is at or above G of the sampled Gaussian
  (its exact g extended to ε < 0): a convex profile below every bound it is
  built from, the exact one (None) or the RDP curve's at many or few orders
  (not convex in e^ε: the lower hull and the pruning must keep it above)."""
  mu, interval = 0.5, 1e-3
  exact = lambda e: P.gaussian_profile(mu, e)
  profile = (exact if orders is None else
             lambda e: P.rdp_profile(_gaussian_rdp(mu, orders), e))
  pld = P.dominating_pld(profile, GAMMA, DELTA, ROUNDS, interval)
  eps = np.linspace(-3, 3, 6001) + interval / 3   # off the grid too
  pos = P.subsampled_profile(exact, GAMMA, np.abs(eps))
  below = np.where(eps >= 0, pos, 1 - np.exp(eps) + np.exp(eps) * pos)
  got = np.asarray(pld.get_delta_for_epsilon(list(eps)))
  assert np.all(got >= below)
  if orders is None:   # tight: the chords' gap on the 1e-3 grid
    assert np.max(got - below) < 1e-5


@pytest.mark.parametrize('gamma, eps, name', [
    (0.0, [0.0], 'gamma'), (1.5, [0.0], 'gamma'), (0.5, [-1.0], 'eps')])
def test_subsampled_profile_rejects_bad_arguments(gamma, eps, name):
  with pytest.raises(ValueError, match=name):
    P.subsampled_profile(lambda e: np.ones_like(e), gamma, eps)


def test_bad_arguments_are_named():
  with pytest.raises(ValueError, match='interval'):
    P.profile_epsilon(lambda e: np.zeros_like(e), 0.5, 2, 1e-5, interval=0.0)
  with pytest.raises(ValueError, match='mu'):
    P.gaussian_profile(-1.0, [0.0])
  with pytest.raises(ValueError, match='rdp'):
    P.rdp_profile({1: 0.3}, [0.0])
  with pytest.raises(ValueError, match='rdp'):
    P.rdp_profile({2: -0.1}, [0.0])


# --- Brute force: every cohort of a tiny population.

_OTHERS = [(1.0, -1.0, 1.0, -1.0, 1.0), (0.3, -0.77, 0.05, 1.0, -1.0),
           (0.61, 0.61, -0.2, -0.93, 0.0)]
_TARGETS = [(1.0, -1.0), (0.4, -0.25), (1.0, 0.0)]
_MECHS = {'rqm': mechanisms.RQM(clip=1.0, delta=1.0, num_levels=4, q=0.3),
          'pbm': mechanisms.PBM(clip=1.0, num_levels=4, theta=0.2)}


def _population_profile(mech, x, x2, others, cohort_size):
  """δ_M over exactly the pairs the coupling meets in this population: the
  target's x, x' or another client's input against each other, the rest of
  the cohort any (n−1)-subset of the others, both orders."""
  pairs = []
  for rest in itertools.combinations(range(len(others)), cohort_size - 1):
    base = np.ones(1)
    for i in rest:
      base = np.convolve(base, mech.pmf(others[i]))
    values = [x, x2] + [others[i] for i in range(len(others)) if i not in rest]
    laws = [np.convolve(base, mech.pmf(v)) for v in values]
    pairs += [(a, b) for a, b in itertools.permutations(laws, 2)]
  def profile(eps):
    eps = np.asarray(eps, np.float64)
    return np.max([_hockey(a, b, eps) for a, b in pairs], 0) * (1 + 1e-9)
  return profile


@pytest.mark.parametrize('name', sorted(_MECHS))
@pytest.mark.parametrize('cohort_size, rounds', [(2, 2), (3, 2), (2, 3)])
def test_route_holds_against_every_cohort_of_a_tiny_population(
    name, cohort_size, rounds):
  """N = 6, fixed-size cohorts without replacement, replace-one; the
  others interior, off-lattice and mixed. Two checks: the accountant's
  profile route (proved RDP → profile, any others) is at or above the
  exact ε of every run and below the RDP route; and the amplification and
  composition alone, fed the exact profile of the pairs this population
  meets, stay above that population's exact δ at every ε checked, and
  close to it (the subsampling step is tight for these small cohorts up
  to the coupling's worst case)."""
  mech, delta, total = _MECHS[name], 1e-3, 6
  acc = C.RoundAccountant(mech, cohort_size, total, delta)
  proved = acc.epsilon_profile(rounds)[0]
  assert proved < acc.epsilon_rdp(rounds)[0]
  worst, ratio = 0.0, 0.0
  for others in _OTHERS:
    for x, x2 in _TARGETS:
      p = population.round_law(mech, (x,) + others, cohort_size)
      q = population.round_law(mech, (x2,) + others, cohort_size)
      worst = max(worst, population.true_epsilon(p, q, rounds, delta))
      big_p, big_q = population.run_laws(p, q, rounds)
      own = _population_profile(mech, x, x2, others, cohort_size)
      masses, infinity = P.dominating_pair(own, cohort_size / total, delta,
                                           rounds, 1e-3)
      composed, _ = P.composed_delta(masses, infinity, rounds, 1e-3)
      for eps in (0.0, 0.25, 0.5, 1.0, 2.0):
        exact = population.true_delta(big_p, big_q, eps)
        bound = composed(eps)
        assert exact <= bound
        if exact > 1e-3:
          ratio = max(ratio, exact / bound)
  assert 0 < worst <= proved
  assert ratio > 0.5   # the amplification step itself is not loose here


# --- The Gaussian reference and the quantized mechanisms in the frontier's
# setting (d is immaterial for the Gaussian: its round is closed form).

def _gaussian(z):
  """The central Gaussian whose round has μ = Δ/σ_sum = 1/z (one
  coordinate, c = 1: Δ = 2, σ_sum = √n·σ)."""
  return mechanisms.Gaussian(1.0, 2 * z / math.sqrt(N_))


@pytest.mark.parametrize('z', [1.0, 2.0, 2.4, 3.5, 6.0])
def test_gaussian_exact_profile_route_is_never_above_thm27(z):
  acc = C.RoundAccountant(_gaussian(z), N_, TOTAL, DELTA)
  thm27 = acc.epsilon_rdp(ROUNDS)[0]
  route = acc.epsilon_profile(ROUNDS)[0]
  assert route <= thm27 + 2e-3


def test_gaussian_exact_profile_is_at_the_rdp_curves_mu():
  """The μ the closed form uses is the sensitivity `sum_divergences` is at:
  on the coordinate route the accountant's round RDP is α·μ²/2; on the ℓ2
  route its curve (grid and majorant) is at or above α·μ²/2, μ = S/σ_sum
  with S = 2·l2_clip the largest distance of two clipped updates."""
  acc = C.RoundAccountant(_gaussian(2.0), N_, TOTAL, DELTA)
  assert acc._gaussian_mu() == pytest.approx(0.5, rel=1e-12)   # pylint: disable=protected-access
  for a in (2, 8, 32):
    assert acc.rdp[a] == pytest.approx(a * 0.25 / 2, rel=1e-9)
  mech = mechanisms.Gaussian(0.5, 0.3)
  acc = C.RoundAccountant(mech, N_, TOTAL, DELTA, dim=16, l2_clip=1.0)
  mu = 2.0 / (math.sqrt(N_) * 0.3)
  assert acc._gaussian_mu() == pytest.approx(mu, rel=1e-12)   # pylint: disable=protected-access
  for a in (2, 8, 32):
    assert a * mu * mu / 2 <= acc.rdp[a]


def test_profile_route_removes_most_of_thm9s_excess_at_eps_1():
  """At ε ≈ 1: the Gaussian by its exact profile well below Thm 27 (0.913
  against 1.98 at z = 2), and from its RDP curve alone (what every
  quantized mechanism gets) below Thm 9 and Thm 27."""
  acc = C.RoundAccountant(_gaussian(2.0), N_, TOTAL, DELTA)
  exact = acc.epsilon_profile(ROUNDS)[0]
  assert exact == pytest.approx(0.913, abs=2e-3)
  generic = C.RoundAccountant.from_round_rdp(
      dict(acc.rdp), N_, TOTAL, DELTA, 1, 'the Gaussian\'s RDP curve')
  from_rdp = generic.epsilon_profile(ROUNDS)[0]
  assert exact < from_rdp < acc.epsilon_rdp(ROUNDS)[0] < generic.epsilon_rdp(
      ROUNDS)[0]
  assert from_rdp == pytest.approx(1.318, abs=3e-3)


def test_profile_route_is_strictly_tighter_for_a_quantized_mechanism():
  """PBM in the frontier's sampling (100 of 3,400, 300 rounds), its
  parameter set where the RDP route gives ε ≈ 1.5: the profile route is
  below it and is the one reported."""
  mech = mechanisms.PBM(clip=1.0, num_levels=16, theta=0.03)
  g = C.training_guarantee(mech, ROUNDS, N_, TOTAL, DELTA, dim=4,
                           attained=False, use_profile=True)
  assert g.route == 'profile'
  assert g.epsilon == g.epsilon_profile < 0.8 * g.epsilon_rdp
  assert 0.5 < g.epsilon_rdp < 3


def test_interval_discretisation_is_small():
  profile = lambda e: P.gaussian_profile(0.5, e)
  coarse = P.profile_epsilon(profile, GAMMA, ROUNDS, DELTA, 1e-3)
  fine = P.profile_epsilon(profile, GAMMA, ROUNDS, DELTA, 1e-5)
  default = P.profile_epsilon(profile, GAMMA, ROUNDS, DELTA)
  assert fine <= default <= coarse
  assert default - fine < 1e-5


@pytest.mark.parametrize('z', [2.0, 3.0, 6.0, 12.0])
def test_orders_up_to_twice_the_binding_order_lose_nothing(z):
  """Calibration evaluates the orders up to max(8, 2α + 2), α the binding
  order: on the Gaussian's curve the route's ε is the same as with every
  order to 64 (and α grows as the noise does: higher orders matter)."""
  rdp = _gaussian_rdp(1 / z)
  alpha = P.binding_order(rdp, GAMMA, DELTA, ROUNDS)
  cap = max(8, 2 * alpha + 2)
  capped = {a: r for a, r in rdp.items() if a <= cap}
  full = P.profile_epsilon(lambda e: P.rdp_profile(rdp, e), GAMMA, ROUNDS,
                           DELTA)
  assert P.profile_epsilon(lambda e: P.rdp_profile(capped, e), GAMMA, ROUNDS,
                           DELTA) == pytest.approx(full, rel=1e-6)
  few = {a: r for a, r in rdp.items() if a <= 8}
  if z >= 6:   # the cap is not vacuous there
    assert P.profile_epsilon(lambda e: P.rdp_profile(few, e), GAMMA, ROUNDS,
                             DELTA) > 1.1 * full
  assert math.isnan(P.binding_order({2: math.inf}, GAMMA, DELTA, ROUNDS))


# --- The composition (`composed_delta`): every rounding carried.

def _exact_composed_delta(masses, infinity, rounds, interval, eps):
  """δ_T(ε) of the pair in 40-digit arithmetic: the T-fold convolution of
  the finite masses term by term."""
  with mpmath.workdps(40):
    one = {k: mpmath.mpf(v) for k, v in masses.items()}
    law = cases.sparse_power(one, rounds, mpmath.mpf(1))
    finite = mpmath.fsum(pv * max(0, 1 - mpmath.exp(eps - s * mpmath.mpf(interval)))
                         for s, pv in law.items())
    return 1 - (1 - mpmath.mpf(infinity))**rounds + finite


@pytest.mark.parametrize('rounds', [1, 2, 5])
def test_composed_delta_is_at_or_above_the_exact_and_close(rounds):
  """Random pairs on a coarse grid (masses spanning 1e-12 to 1): the bound
  is never below the 40-digit δ_T and within 1e-9 of it plus the window's
  tail share."""
  rng = np.random.default_rng(rounds)
  for _ in range(4):
    ks = np.sort(rng.choice(np.arange(-30, 60), size=12, replace=False))
    raw = np.exp(rng.uniform(-28, 0, ks.size))
    infinity = 1e-6
    masses = dict(zip(ks.tolist(), (raw / raw.sum() * (1 - infinity)).tolist()))
    bound, _ = P.composed_delta(masses, infinity, rounds, 0.05)
    for eps in (0.0, 0.3, 1.0, 2.5):
      exact = _exact_composed_delta(masses, infinity, rounds, 0.05, eps)
      assert mpmath.mpf(bound(eps)) >= exact
      assert bound(eps) <= float(exact) * (1 + 1e-9) + 2e-12


@pytest.mark.parametrize('z', [1.879, 0.987, 0.601])
def test_proved_composition_reads_just_above_dp_accountings(z):
  """The Gaussian's pair in the frontier's setting: the proved ε is at or
  above dp-accounting's FFT composition (no error carried) and within
  1e-6 of it (measured 0.6-4.7e-7: the carried error and the window's
  τ = 1e-7·δ)."""
  profile = lambda e: P.gaussian_profile(1.0 / z, e)
  pld = P.dominating_pld(profile, GAMMA, DELTA, ROUNDS)
  theirs = pld.self_compose(ROUNDS).get_epsilon_for_delta(DELTA)
  ours = P.profile_epsilon(profile, GAMMA, ROUNDS, DELTA)
  assert theirs * (1 - 1e-12) <= ours <= theirs * (1 + 1e-6)


def test_composition_edges_and_bad_arguments():
  assert P.composed_epsilon({0: 1.0}, 0.0, 3, 1e-5, 0.1) == 0.0
  assert P.composed_epsilon({5: 0.5}, 0.5, 3, 1e-5, 0.1) == math.inf
  with pytest.raises(ValueError, match='infinity'):
    P.composed_delta({1: 0.5}, 1.5, 2, 0.1)
  with pytest.raises(ValueError, match='rounds'):
    P.composed_delta({1: 0.5}, 0.1, 0, 0.1)
  with pytest.raises(ValueError, match='tail'):
    P.composed_delta({1: 0.5}, 0.1, 2, 0.1, tail=0.0)


def test_a_law_below_the_tail_share_takes_a_small_window_at_once():
  """Helper review: where the finite mass^T is below τ the Chernoff cuts
  crossed and the FFT was sized from a negative width (2^28 points, tens of
  seconds); the window is clamped into the support (`loss_pmf.sum_window`,
  tested there)."""
  bound, _ = P.composed_delta({18: 3.8863997202133414e-08}, 0.0, 10,
                              4.0867e-08, tail=0.0076)
  assert 0.0076 <= bound(0.0) <= 0.0077


def test_rdp_profile_is_the_least_term_over_every_order():
  """Each order's term is exponentiated only where it can lower the bound:
  the result is the elementwise least of every order's rounded-up term
  (computed here for all of them), to the bit, from ε = −5 to 1e5."""
  lib = P._LIB
  rdp = {1.5: 0.02, 2: 0.05, 3.25: 0.11, 8: 0.6, 32: 3.0, 256: 40.0,
         1000: 1e3, math.inf: 7.0, 5: math.inf}
  eps = np.concatenate([np.linspace(-5, 70, 30001), [0.0, 1e-300, 700, 1e5]])
  want = np.ones_like(eps)
  for a, rho in rdp.items():
    if not math.isfinite(rho):
      continue
    if math.isinf(a):
      want = np.where(eps >= rho * (1 + 2 * P._U), 0.0, want)
      continue
    log_c = (a - 1) * math.log1p(-1 / a) - math.log(a)
    with np.errstate(over='ignore'):
      log_d = (a - 1) * (rho - eps) + log_c
      log_d += 4 * lib * ((a - 1) * (rho + np.abs(eps) + 1) + math.log(a) + 1)
      want = np.minimum(want, np.exp(log_d) * (1 + lib) + P._TINY)
  np.testing.assert_array_equal(P.rdp_profile(rdp, eps), np.minimum(want, 1.0))
