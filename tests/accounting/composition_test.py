import itertools
import math

import dp_accounting
import numpy as np
import pytest
from scipy import special

from tff_quant import mechanisms
from tff_quant.accounting import composition as C
from tff_quant.accounting import rdp_route
from tff_quant.accounting import secure_sum
from tests.accounting import population


def test_gaussian_equivalent_matches_dp_accounting():
  """A finely quantized Gaussian without sampling ~ dp-accounting's Gaussian event.

  Quantization and saturation are post-processing, so ours must not exceed the
  Gaussian's ε, and with 256 levels it should be close to it.
  """
  clip, z, rounds, delta = 1.0, 0.5, 10, 1e-5
  mech = mechanisms.QuantizedGaussian(clip=clip, num_levels=256, sigma=z * clip)
  ours = C.training_guarantee(mech, rounds, 1, 1, delta, use_pld=True,
                              pld_interval=1e-3, others='extremes')
  acc = dp_accounting.rdp.RdpAccountant(list(rdp_route.DEFAULT_ORDERS))
  acc.compose(dp_accounting.GaussianDpEvent(z), rounds)
  gauss_rdp = acc.get_epsilon(delta)
  pld = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-3)
  pld.compose(dp_accounting.GaussianDpEvent(z), rounds)
  gauss_pld = pld.get_epsilon(delta)
  assert ours.epsilon_rdp <= gauss_rdp * (1 + 1e-6)
  assert ours.epsilon_rdp >= 0.8 * gauss_rdp
  assert ours.epsilon_pld <= gauss_pld * (1 + 1e-3) + 1e-2
  assert ours.epsilon_pld >= 0.8 * gauss_pld


def test_guarantee_grows_with_rounds_and_dim():
  mech = mechanisms.PBM(clip=1.0, num_levels=16, theta=0.25)
  e1 = C.training_guarantee(mech, 10, 40, 3400, 1e-5, use_pld=False).epsilon
  e2 = C.training_guarantee(mech, 100, 40, 3400, 1e-5, use_pld=False).epsilon
  e3 = C.training_guarantee(mech, 10, 40, 3400, 1e-5, dim=10, use_pld=False).epsilon
  assert e1 < e2 and e1 < e3
  g = C.training_guarantee(mech, 10, 40, 3400, 1e-5, others='extremes',
                           use_profile=True)
  assert g.epsilon == min(g.epsilon_rdp, g.epsilon_pld, g.epsilon_profile)
  assert 'ASSUMED: others at ±c' in g.assumptions
  proved = C.training_guarantee(mech, 10, 40, 3400, 1e-5)
  assert proved.epsilon_pld is None and 'others=' in proved.pld_note
  assert 'any inputs of the others' in proved.assumptions
  assert 'replace-one' in g.assumptions and '40 of 3400' in g.assumptions


def test_infinite_divergence_is_reported_not_hidden():
  g = C.training_guarantee(mechanisms.QMGeo(1.0, 8, 0.5), 5, 4, 100, 1e-5,
                           use_pld=False)
  assert math.isinf(g.per_round_rdp[math.inf])


@pytest.mark.parametrize('kwargs, name', [
    (dict(rounds=0), 'rounds'), (dict(clients_per_round=0), 'clients_per_round'),
    (dict(clients_per_round=50, total_clients=10), 'clients_per_round'),
    (dict(delta=0.0), 'delta'), (dict(delta=1.5), 'delta'), (dict(dim=0), 'dim')])
def test_invalid_arguments_raise(kwargs, name):
  args = dict(rounds=10, clients_per_round=4, total_clients=100, delta=1e-5)
  args.update(kwargs)
  with pytest.raises(ValueError, match=name):
    C.training_guarantee(mechanisms.PBM(1.0, 16, 0.25), **args)


def test_guarantee_says_when_a_sub_sum_was_searched():
  """With the cost limit between the searches of 3 and 4 clients (the ℓ2
  route's narrow grid, which it takes where the wide one is over the limit,
  and ladder: orders 2, 3, 4), the 6-client ℓ2 route searches the target
  and 2 others, and the text says so."""
  mech = mechanisms.get('rqm').for_coordinate_bound(0.5, num_levels=8)
  grid = secure_sum.l2_grid(mech, math.sqrt(2.0**2 / 16), 24, 6, wide=False)
  cost = lambda n: secure_sum.search_operations(
      mech, n, 3, secure_sum.off_lattice(mech, grid), secure_sum.DEFAULT_CELLS)
  assert cost(3) < cost(4)
  limits = secure_sum.Limits(max_operations=(cost(3) + cost(4)) / 2)
  rdp = secure_sum.vector_rdp(mech, [2.0, 4.0], 6, 16, 2.0, limits=limits)
  assert 'the target and 2 of the 5 others searched' in rdp.method
  g = C.training_guarantee(mech, 3, 6, 60, 1e-5, dim=16, l2_clip=1.0,
                           orders=[2, 4], limits=limits)
  assert 'the target and 2 of the 5 others searched' in g.assumptions
  assert cost(6) <= secure_sum.DEFAULT_LIMITS.max_operations   # all 6 searched
  g_all = C.training_guarantee(mech, 3, 6, 60, 1e-5, dim=16, l2_clip=1.0,
                               orders=[2, 4])
  assert 'searched' not in g_all.assumptions and g_all.epsilon <= g.epsilon


# BQ: every Rényi divergence is infinite; the RDP routes account the sum
# conditioned on a window (`ConditionedSum`, docs/privacy.md "Conditioning on
# a window"). Brute force at n = 2: the target at every pair of grid inputs
# (vertices and midpoints), the other client at every grid input.
_BQ = mechanisms.BQ(1.0, 1, 60)
_GRID = np.linspace(-1.0, 1.0, 5)


def _sum_law(mech, inputs):
  law = np.ones(1)
  for x in inputs:
    law = np.convolve(law, mech.pmf(x))
  return law


def _conditioned_divergences(mech, window, orders, others=_GRID):
  """{order: [target input a, target input b] -> max over the other's input
  (in `others`) of D_α(P|W ‖ Q|W)} for the two-client sum."""
  lo, hi = window
  out = {a: np.zeros((len(_GRID), len(_GRID))) for a in orders}
  for x_o in others:
    laws = [_sum_law(mech, (x, x_o))[lo:hi + 1] for x in _GRID]
    laws = [law / law.sum() for law in laws]
    for (i, p), (j, q) in itertools.product(enumerate(laws), repeat=2):
      for a in orders:
        lp, lq = np.log(p), np.log(q)
        d = (np.max(lp - lq) if math.isinf(a) else
             special.logsumexp(a * lp + (1 - a) * lq) / (a - 1))
        out[a][i, j] = max(out[a][i, j], d)
  return out


# A wide tail makes the window narrow and its normalisation count.
TAILS = (0.05, C.CONDITIONING_TAIL)


@pytest.mark.parametrize('tail', TAILS)
def test_conditioned_rdp_bounds_the_conditioned_sums_divergences(tail):
  acc = C.RoundAccountant(_BQ, 2, 2, 1e-5, dim=1, conditioning_tail=tail)
  assert not acc.l2_route and acc.conditioned is not None
  orders = (2, 8, 32, math.inf)
  brute = _conditioned_divergences(_BQ, acc.conditioned.window, orders)
  for a in orders:
    worst = brute[a].max()
    assert worst <= acc.rdp[a] * (1 + 1e-9)
    if tail == C.CONDITIONING_TAIL:
      # The others on the grid attain the sum reduction: the bound is close.
      assert worst >= 0.95 * acc.rdp[a]


@pytest.mark.parametrize('tail', TAILS)
def test_conditioned_l2_route_bounds_the_conditioned_vector_divergences(tail):
  # d = 2, ℓ2 clip 1 < c·√2: pairs of 2-vectors whose difference is <= 2
  # in ℓ2. The conditioned law is a product over coordinates, so D_α adds
  # and the other's coordinates are chosen independently.
  acc = C.RoundAccountant(_BQ, 2, 2, 1e-5, dim=2, l2_clip=1.0,
                          conditioning_tail=tail)
  assert acc.l2_route
  orders = (2, 8, 32)
  brute = _conditioned_divergences(_BQ, acc.conditioned.window, orders)
  pairs = [(i, j) for i, j in itertools.product(range(len(_GRID)), repeat=2)]
  for a in orders:
    worst = max(brute[a][i1, j1] + brute[a][i2, j2]
                for (i1, j1), (i2, j2) in itertools.product(pairs, repeat=2)
                if (_GRID[i1] - _GRID[j1])**2 + (_GRID[i2] - _GRID[j2])**2
                <= 4 + 1e-12)
    assert worst <= acc.rdp[a] * (1 + 1e-9)


@pytest.mark.parametrize('tail', TAILS)
def test_conditioned_attained_end_is_what_named_inputs_attain(tail):
  """The lower end: the two-client sum with the other at 0, conditioned on
  the window, at the worst target pair: exactly what those inputs attain."""
  acc = C.RoundAccountant(_BQ, 2, 2, 1e-5, dim=1, conditioning_tail=tail)
  orders = (2, 8, 32, math.inf)
  named = _conditioned_divergences(_BQ, acc.conditioned.window, orders,
                                   others=[0.0])
  for a in orders:
    assert acc.attained[a] == pytest.approx(named[a].max(), rel=1e-9)
    assert acc.attained[a] <= acc.rdp[a]


def test_conditioned_epsilon_pays_the_tail_in_delta_and_epsilon():
  acc = C.RoundAccountant(_BQ, 2, 20, 1e-5, dim=3)
  eta = acc.conditioned.tail
  rounds = 7
  sub = [rdp_route.subsampled_rdp_without_replacement(acc.rdp, 0.1, a)
         for a in acc.orders]
  eps, _ = rdp_route.epsilon_from_rdp(acc.orders, sub, rounds,
                                      1e-5 - rounds * 3 * eta)
  assert acc.epsilon_rdp(rounds)[0] == pytest.approx(
      eps - rounds * 3 * math.log1p(-eta), rel=1e-12)
  assert 'T·d·η is added to δ' in acc.guarantee(rounds).assumptions
  assert 'others 1 at 0' in acc.guarantee(rounds).attained_inputs
  # T·d·η >= δ: no (ε, δ) by this route.
  assert math.isinf(C.RoundAccountant(_BQ, 2, 20, eta, dim=3).epsilon_rdp(1)[0])


def _exact_epsilon(mech, delta):
  """One round, one coordinate, both clients always in: the smallest ε with
  sup over inputs of the hockey-stick divergence <= delta (bisection)."""
  laws = {x: [_sum_law(mech, (x, x_o)) for x_o in _GRID] for x in _GRID}

  def hockey(eps):
    return max(np.sum(np.maximum(p - math.exp(eps) * q, 0.0))
               for a, b in itertools.product(_GRID, repeat=2)
               for p, q in zip(laws[a], laws[b]))
  lo, hi = 0.0, 20.0
  for _ in range(50):
    mid = (lo + hi) / 2
    lo, hi = (lo, mid) if hockey(mid) <= delta else (mid, hi)
  return hi


def test_conditioned_route_is_sound_against_the_exact_epsilon_and_the_pld():
  g = C.training_guarantee(_BQ, 1, 2, 2, 1e-5, dim=1, pld_interval=1e-4)
  exact = _exact_epsilon(_BQ, 1e-5)
  assert exact <= g.epsilon_rdp <= 1.25 * exact   # 1.449 <= 1.627
  assert g.epsilon_pld == pytest.approx(exact, abs=2e-3)
  # Composed: the PLD route (exact law, pessimistic grid) stays below.
  g5 = C.training_guarantee(_BQ, 5, 2, 2, 1e-5, dim=1, pld_interval=1e-4)
  assert g5.epsilon_pld <= g5.epsilon_rdp <= 1.15 * g5.epsilon_pld


# --- Brute force: the subsampled route against every cohort of a tiny
# population (fixed-size sampling without replacement, replace-one).

@pytest.mark.parametrize('cohort_size, rounds', [(2, 2), (3, 2), (2, 3)])
def test_subsampled_route_holds_against_every_cohort_of_a_tiny_population(
    cohort_size, rounds):
  # N = 6: the target and five others, interior, off-lattice and mixed; the
  # target moved end to end and between interior points. The route's ε (RDP,
  # subsampled at γ = n/N, for any inputs of the others) must be at least
  # the exact ε of every such pair of datasets.
  mech = mechanisms.RQM(clip=1.0, delta=1.0, num_levels=4, q=0.3)
  delta, total = 1e-3, 6
  proved = C.RoundAccountant(mech, cohort_size, total, delta).epsilon_rdp(
      rounds)[0]
  worst = 0.0
  for others in [(1.0, -1.0, 1.0, -1.0, 1.0), (0.3, -0.77, 0.05, 1.0, -1.0),
                 (0.61, 0.61, -0.2, -0.93, 0.0)]:
    for x, x2 in [(1.0, -1.0), (0.4, -0.25), (1.0, 0.0)]:
      p = population.round_law(mech, (x,) + others, cohort_size)
      q = population.round_law(mech, (x2,) + others, cohort_size)
      worst = max(worst, population.true_epsilon(p, q, rounds, delta))
  assert 0 < worst <= proved


# --- The profile route inside the guarantee (its soundness:
# profile_route_test).

def test_the_least_route_is_reported_and_every_route_is_kept():
  mech = mechanisms.PBM(clip=1.0, num_levels=16, theta=0.03)
  g = C.training_guarantee(mech, 300, 100, 3400, 1 / 3400, dim=4,
                           use_profile=True)
  assert g.route == 'profile' and g.epsilon == g.epsilon_profile
  assert g.epsilon < g.epsilon_rdp and g.profile_note == ''
  assert 'profile ε=' in g.summary() and 'BBG18 Thm 2' in g.assumptions
  # The attained end is the same route's, from the attained RDP curve.
  assert g.epsilon_attained <= g.epsilon
  assert g.attained_inputs.startswith('the profile route from the RDP')
  off = C.training_guarantee(mech, 300, 100, 3400, 1 / 3400, dim=4,
                             attained=False)   # the default: opt-in
  assert off.epsilon_profile is None and 'use_profile=False' in off.profile_note
  assert off.epsilon == off.epsilon_rdp == g.epsilon_rdp


def test_profile_route_falls_back_with_the_reason_for_a_conditioned_sum():
  g = C.training_guarantee(_BQ, 3, 2, 20, 1e-5, dim=2, attained=False,
                           use_profile=True)
  assert g.epsilon_profile is None
  assert 'conditioned on a window' in g.profile_note
  assert g.profile_note in g.summary()


def test_profile_route_from_a_given_rdp_curve():
  """A mechanism outside the registry (its per-round RDP given): the
  profile route applies; a conditioned sum's RDP falls back."""
  rdp = {a: a / 8 for a in range(2, 257)}
  rdp[math.inf] = math.inf
  acc = C.RoundAccountant.from_round_rdp(rdp, 100, 3400, 1 / 3400, 1, 'given')
  g = acc.guarantee(300, use_profile=True)
  assert g.route == 'profile' and g.epsilon_profile < g.epsilon_rdp
  cond = _BQ.conditioned_sum(2, 1e-9)
  acc = C.RoundAccountant.from_round_rdp(rdp, 2, 20, 1e-5, 1, 'given',
                                         conditioned=cond)
  assert 'conditioned' in acc.guarantee(3, use_profile=True).profile_note


def test_epsilon_from_curve_is_the_lesser_of_the_curve_routes():
  """The one place "RDP route, or the lesser of it and the profile route"
  is taken (TFF's peers, the frontier's Gaussian references)."""
  rdp = {a: a / 8 for a in range(2, 257)}
  rdp[math.inf] = math.inf
  acc = C.RoundAccountant.from_round_rdp(rdp, 100, 3400, 1 / 3400, 1, 'given')
  eps_rdp, eps_prof = acc.epsilon_rdp(300)[0], acc.epsilon_profile(300)[0]
  assert eps_prof < eps_rdp
  assert acc.epsilon_from_curve(300) == eps_rdp
  assert acc.epsilon_from_curve(300, use_profile=True) == eps_prof
  # Where the profile route does not apply, the RDP route's ε stands.
  cond = _BQ.conditioned_sum(2, 1e-9)
  acc = C.RoundAccountant.from_round_rdp(rdp, 2, 20, 1e-5, 1, 'given',
                                         conditioned=cond)
  assert acc.epsilon_profile(3)[0] is None
  assert acc.epsilon_from_curve(3, use_profile=True) == acc.epsilon_rdp(3)[0]


def test_profile_route_with_dropouts_is_the_sum_of_n_min_sampled_at_n():
  """n_min < n: the round's profile is that of the n_min-client sum (data
  processing), sampled at γ = n/N: between the full cohort's ε and the
  n_min cohort's sampled at n_min/N. For the Gaussian, its closed form
  at the n_min clients' noise."""
  mech = mechanisms.PBM(clip=1.0, num_levels=16, theta=0.03)
  args = (100, 3400, 1 / 3400)
  full = C.RoundAccountant(mech, *args, dim=4).epsilon_profile(300)[0]
  drop = C.RoundAccountant(mech, *args, dim=4, min_clients_per_round=50
                           ).epsilon_profile(300)[0]
  small = C.RoundAccountant(mech, 50, 3400, 1 / 3400, dim=4
                            ).epsilon_profile(300)[0]
  assert full < drop and small < drop
  gauss = mechanisms.Gaussian(1.0, 0.4)
  g_drop = C.RoundAccountant(gauss, *args, min_clients_per_round=50)
  g_50 = C.RoundAccountant(gauss, 50, 3400, 1 / 3400)
  assert g_drop._gaussian_mu() == g_50._gaussian_mu()   # pylint: disable=protected-access
  assert g_drop.epsilon_profile(300)[0] > g_50.epsilon_profile(300)[0]


def test_profile_route_uses_pbms_gaussian_domination():
  """The frontier's 2-level PBM at ε ≈ 1 by the RDP route (d = 61,706, ℓ2
  route, 100 of 3,400, 300 rounds): the profile route's round is the
  dominating Gaussian at μ = 2κ·l2_clip (ε 0.270), below the profile of its
  RDP curve alone (0.381); the guarantee names the argument."""
  dim = 61706
  mech = mechanisms.PBM(2 / math.sqrt(dim), 2, 0.0040029)
  acc = C.RoundAccountant(mech, 100, 3400, 1 / 3400, dim,
                                    l2_clip=1.0)
  kappa = acc.dominating_rate.rate
  assert acc._gaussian_mu() == pytest.approx(2 * kappa, rel=1e-9)  # pylint: disable=protected-access
  assert acc._gaussian_mu() > 2 * kappa  # pylint: disable=protected-access
  eps = acc.epsilon_profile(300)[0]
  from_rdp = C.RoundAccountant.from_round_rdp(
      dict(acc.rdp), 100, 3400, 1 / 3400, dim, 'RDP only').epsilon_profile(
          300)[0]
  assert eps == pytest.approx(0.270, abs=2e-3)
  assert from_rdp == pytest.approx(0.381, abs=3e-3)
  g = acc.guarantee(300, use_pld=False, attained=False, use_profile=True)
  assert g.route == 'profile' and 'Gaussian domination' in g.assumptions
  plain = acc.guarantee(300, use_pld=False, attained=False)
  assert 'Gaussian domination' not in plain.assumptions
  rqm = C.RoundAccountant(mechanisms.RQM(1.0, 1.0, 4, 0.3), 10, 100, 1e-3)
  text = rqm.guarantee(5, use_pld=False, attained=False,
                       use_profile=True).assumptions
  assert 'from its RDP curve' in text and 'no proved Gaussian' in text
