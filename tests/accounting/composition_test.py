import itertools
import math

import dp_accounting
import numpy as np
import pytest
from scipy import special

from tff_quant import mechanisms
from tff_quant.accounting import composition as C
from tff_quant.accounting import divergence
from tff_quant.accounting import vector


def test_gaussian_equivalent_matches_dp_accounting():
  """A finely quantized Gaussian without sampling ~ dp-accounting's Gaussian event.

  Quantization and saturation are post-processing, so ours must not exceed the
  Gaussian's ε, and with 256 levels it should be close to it.
  """
  clip, z, rounds, delta = 1.0, 0.5, 10, 1e-5
  mech = mechanisms.QuantizedGaussian(clip=clip, num_levels=256, sigma=z * clip)
  ours = C.training_guarantee(mech, rounds, 1, 1, delta, use_pld=True,
                              pld_interval=1e-3, others='extremes')
  acc = dp_accounting.rdp.RdpAccountant(list(C.DEFAULT_ORDERS))
  acc.compose(dp_accounting.GaussianDpEvent(z), rounds)
  gauss_rdp = acc.get_epsilon(delta)
  pld = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-3)
  pld.compose(dp_accounting.GaussianDpEvent(z), rounds)
  gauss_pld = pld.get_epsilon(delta)
  assert ours.epsilon_rdp <= gauss_rdp * (1 + 1e-6)
  assert ours.epsilon_rdp >= 0.8 * gauss_rdp
  assert ours.epsilon_pld <= gauss_pld * (1 + 1e-3) + 1e-2
  assert ours.epsilon_pld >= 0.8 * gauss_pld


def test_subsampling_helps_and_is_capped():
  mech = mechanisms.RQM(clip=1.0, delta=1.0, num_levels=16, q=0.42)
  rdp = C.per_round_rdp(mech, 10, orders=range(2, 33))
  for a in [2, 8, 32]:
    assert C.subsampled_rdp_without_replacement(rdp, 1.0, a) == rdp[a]
    vals = [C.subsampled_rdp_without_replacement(rdp, g, a)
            for g in [0.5, 0.1, 0.01]]
    assert all(v <= rdp[a] for v in vals)
    assert vals[0] >= vals[1] >= vals[2]


_RDP = {a: 0.1 * a for a in range(2, 9)}   # a Gaussian-like RDP curve


@pytest.mark.parametrize('gamma, error, match', [
    (0.0, ValueError, r'`gamma` must be in \(0, 1\]'),
    (-0.5, ValueError, r'`gamma` must be in \(0, 1\]'),
    (1.5, ValueError, r'`gamma` must be in \(0, 1\]'),
    (math.nan, ValueError, '`gamma` must be finite'),
    ('0.5', TypeError, '`gamma` must be a number')])
def test_gamma_raises(gamma, error, match):
  with pytest.raises(error, match=match):
    C.subsampled_rdp_without_replacement(_RDP, gamma, 4)


@pytest.mark.parametrize('alpha, error, match', [
    (1, ValueError, r'`alpha` must be in \[2, inf\)'),
    (0, ValueError, r'`alpha` must be in \[2, inf\)'),
    (2.5, TypeError, '`alpha` must be an integer'),
    (4.0, TypeError, '`alpha` must be an integer')])
def test_alpha_raises(alpha, error, match):
  with pytest.raises(error, match=match):
    C.subsampled_rdp_without_replacement(_RDP, 0.1, alpha)


@pytest.mark.parametrize('rdp, gamma, error, match', [
    ({2: 0.2, 4: 0.4}, 0.1, ValueError,
     r'`rdp` must hold every integer order in \[2, 4\].*missing \[3\]'),
    ({2: 0.2, 3: 0.3}, 1.0, ValueError,
     r'`rdp` must hold order 4.*missing \[4\]'),
    ({**_RDP, 3: -0.1}, 0.1, ValueError, r'`rdp`\[3\] must be in \[0, inf\]'),
    ({**_RDP, 2: math.nan}, 0.1, ValueError,
     r'`rdp`\[2\] must be in \[0, inf\]'),
    ({**_RDP, math.inf: -1.0}, 0.1, ValueError,
     r'`rdp`\[inf\] must be in \[0, inf\]'),
    ({**_RDP, 4: 'x'}, 0.1, TypeError, r'`rdp`\[4\] must be a number'),
    ([0.2, 0.3, 0.4], 0.1, TypeError, '`rdp` must map Rényi orders')])
def test_rdp_raises(rdp, gamma, error, match):
  with pytest.raises(error, match=match):
    C.subsampled_rdp_without_replacement(rdp, gamma, 4)


def test_subsampled_rdp_edges_that_are_valid():
  # γ = 1 reads only rdp[α]; infinite values (D∞ or an order) are allowed.
  assert C.subsampled_rdp_without_replacement({4: 0.4}, 1.0, 4) == 0.4
  assert C.subsampled_rdp_without_replacement(
      {**_RDP, math.inf: math.inf}, 0.1, 4) == (
          C.subsampled_rdp_without_replacement(_RDP, 0.1, 4))
  assert C.subsampled_rdp_without_replacement(
      dict.fromkeys(range(2, 5), math.inf), 0.1, 4) == math.inf
  zero = C.subsampled_rdp_without_replacement(dict.fromkeys(range(2, 5), 0.0),
                                              0.1, 4)
  assert zero == 0.0


def test_epsilon_from_rdp_matches_dp_accounting_and_skips_infinite_orders():
  orders, per_round = [2, 3, 4, 5], [0.02, 0.03, math.inf, 0.05]
  eps, order = C.epsilon_from_rdp(orders, per_round, 10, 1e-5)
  expected = dp_accounting.rdp.compute_epsilon(
      [2, 3, 5], [0.2, 0.3, 0.5], 1e-5)
  assert (eps, order) == (pytest.approx(expected[0], rel=1e-15), expected[1])
  eps, order = C.epsilon_from_rdp(orders, [math.inf] * 4, 10, 1e-5)
  assert eps == math.inf and math.isnan(order)


def test_guarantee_grows_with_rounds_and_dim():
  mech = mechanisms.PBM(clip=1.0, num_levels=16, theta=0.25)
  e1 = C.training_guarantee(mech, 10, 40, 3400, 1e-5, use_pld=False).epsilon
  e2 = C.training_guarantee(mech, 100, 40, 3400, 1e-5, use_pld=False).epsilon
  e3 = C.training_guarantee(mech, 10, 40, 3400, 1e-5, dim=10, use_pld=False).epsilon
  assert e1 < e2 and e1 < e3
  g = C.training_guarantee(mech, 10, 40, 3400, 1e-5, others='extremes')
  assert g.epsilon == min(g.epsilon_rdp, g.epsilon_pld)
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


def test_coordinate_route_takes_the_worst_vertex_pair_not_only_the_ends():
  # RQM defaults at n = 1, α = 8: the pair at ±c gives 5.315642, an interior
  # pair of critical inputs 5.344229 (tests/accounting/vector_test.py).
  mech = mechanisms.get('rqm').for_coordinate_bound(1.0)
  rdp = C.per_round_rdp(mech, 1, 3, orders=range(2, 17))
  assert rdp[8] == pytest.approx(3 * 5.344228585, abs=1e-7)
  for a in range(2, 17):   # between ladder rungs: convexity, never below a rung's
    assert rdp[a] >= 3 * C.divergence.renyi_divergence_of_sum(
        mech, a, 1).value * (1 - 1e-12)
  guarantee = C.training_guarantee(mech, 5, 1, 10, 1e-5, use_pld=True,
                                   others='extremes')
  assert guarantee.epsilon_pld is None and 'interior pair' in guarantee.pld_note


@pytest.mark.parametrize('name', ['pbm', 'quantized_gaussian'])
@pytest.mark.parametrize('n', [1, 2])
def test_end_pair_is_the_worst_target_pair_for_the_smooth_mechanisms(name, n):
  # PBM and the quantized Gaussian keep targets at ±c: a fine grid of target
  # pairs (and the other client at ±c or 0) finds nothing worse.
  mech = mechanisms.get(name).for_coordinate_bound(1.0, num_levels=8)
  grid = [-1.0, -0.6, -0.2, 0.0, 0.3, 0.7, 1.0]
  for alpha in (2.0, 8.0):
    ends = C.divergence.renyi_divergence_of_sum(mech, alpha, n).value
    for x, x2 in itertools.combinations(grid, 2):
      for other in ([] if n == 1 else [[-1.0], [0.0], [1.0]]) or [[]]:
        parts = [(mech.log_pmf(o), 1) for o in other]
        p = C.divergence.sum_log_pmf([(mech.log_pmf(x), 1)] + parts)
        q = C.divergence.sum_log_pmf([(mech.log_pmf(x2), 1)] + parts)
        for a, b in ((p, q), (q, p)):
          assert C.divergence.renyi_divergence(a, b, alpha) <= ends * (1 + 1e-9)


def test_extremes_fall_back_to_the_local_bound_where_the_sum_is_unresolved():
  # σ = 1e6·Cq: interior levels ~1e-300, beyond what the tilted FFTs resolve.
  mech = mechanisms.get('quantized_gaussian')(clip=2.0, num_levels=16, sigma=2e6)
  with pytest.raises(divergence.UnresolvedSumError):
    divergence.renyi_divergence_of_sum(mech, [2, 3], 3)
  rdp = C.per_round_rdp(mech, 3, dim=2, orders=[3], others='extremes')
  assert rdp[2] == pytest.approx(2 * 2 * 2.0**2 / (2 * 2e6**2), rel=1e-12)
  assert rdp[3] == pytest.approx(1.5 * rdp[2], rel=1e-12)


def test_large_extremes_sums_take_a_bound_that_is_above_the_exact_value(
    monkeypatch):
  """With the size limits at 0, PBM takes its one-trial reduction and RQM (no
  reduction, no local bound) its local D∞; each is >= the exact extremes value, and
  PBM's reduction stays within 1% of it (0.3% here)."""
  orders = [2, 4, 8]
  pbm = mechanisms.get('pbm')(clip=1.0, num_levels=16, theta=0.05)
  rqm = mechanisms.get('rqm').for_coordinate_bound(1.0, num_levels=8)
  exact = {m.name: C.per_round_rdp(m, 6, orders=orders, others='extremes')
           for m in (pbm, rqm)}
  monkeypatch.setattr(C, 'REDUCE_ABOVE_POINTS', 0)
  monkeypatch.setattr(C, 'LOCAL_ABOVE_POINTS', 0)
  for m in (pbm, rqm):
    bound = C.per_round_rdp(m, 6, orders=orders, others='extremes')
    for a in orders:
      assert bound[a] >= exact[m.name][a] * (1 - 1e-9), (m.name, a)
  reduced = C.per_round_rdp(pbm, 6, orders=orders, others='extremes')
  for a in orders:
    assert reduced[a] == pytest.approx(exact['pbm'][a], rel=1e-2)
  bound = C.per_round_rdp(rqm, 6, orders=orders, others='extremes')
  assert bound[4] == pytest.approx(divergence.epsilon_infinity(rqm), rel=1e-12)


def test_guarantee_says_when_a_sub_sum_was_searched(monkeypatch):
  """With the cost limit at 3 clients (a cost model of one per client), the
  6-client ℓ2 route searches the target and 2 others, and the text says so."""
  mech = mechanisms.get('rqm').for_coordinate_bound(0.5, num_levels=8)
  monkeypatch.setattr(vector, '_search_operations', lambda m, n, *a: float(n))
  monkeypatch.setattr(vector, 'MAX_OPERATIONS', 3.0)
  rdp = vector.vector_rdp(mech, [2.0, 4.0], 6, 16, 2.0)
  assert 'the target and 2 of the 5 others searched' in rdp.method
  g = C.training_guarantee(mech, 3, 6, 60, 1e-5, dim=16, l2_clip=1.0,
                           orders=[2, 4])
  assert 'the target and 2 of the 5 others searched' in g.assumptions
  monkeypatch.setattr(vector, 'MAX_OPERATIONS', 10.0)   # all 6 searched
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
  sub = [C.subsampled_rdp_without_replacement(acc.rdp, 0.1, a)
         for a in acc.orders]
  eps, _ = C.epsilon_from_rdp(acc.orders, sub, rounds, 1e-5 - rounds * 3 * eta)
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
