"""Tests for tff_quant/accounting/attained.py: each figure is what its named
inputs attain (recomputed independently), never above the proved bound, on
clipped updates on the ℓ2 route; and guarantees print ε ∈ [attained, proved]."""

import math

import pytest

from tff_quant import mechanisms
from tff_quant.accounting import attained
from tff_quant.accounting import composition
from tff_quant.accounting import divergence
from tff_quant.accounting import secure_sum

ORDERS = tuple(range(2, 9))
MECHANISMS = {
    'rqm': lambda c: mechanisms.RQM(c, c, 16, 0.42),
    'pbm': lambda c: mechanisms.PBM(c, 8, 0.2),
    'qmgeo': lambda c: mechanisms.QMGeo(c, 8, 0.5, full_support=True),
    'quantized_gaussian': lambda c: mechanisms.QuantizedGaussian(2 * c, 8, c),
    'randomized_projection': lambda c: mechanisms.get(
        'randomized_projection').for_coordinate_bound(c, bits=3, q=0.6),
}


def _recomputed(mech, config, alpha):
  """The configuration's round D_α from scratch (tilted-FFT sums, log space)."""
  total = 0.0
  for i, (k, x, y) in enumerate(config.pairs):
    if not k:
      continue
    rest = [(mech.log_pmf(v), m) for m, v in config.others_at(i) if m]
    p = divergence.sum_log_pmf([(mech.log_pmf(x), 1)] + rest)
    q = divergence.sum_log_pmf([(mech.log_pmf(y), 1)] + rest)
    total += k * divergence.renyi_divergence(p, q, alpha)
  return total


@pytest.mark.parametrize('name', sorted(MECHANISMS))
@pytest.mark.parametrize('l2_clip', [None, 1.0])
def test_named_inputs_attain_the_figure_and_it_is_below_the_proof(name,
                                                                  l2_clip):
  dim, n = 50, 6
  c = 0.5 if l2_clip is None else 4 / math.sqrt(dim)
  mech = MECHANISMS[name](c)
  found = attained.round_rdp(mech, ORDERS, n, dim, l2_clip)
  accountant = composition.RoundAccountant(mech, n, 100, 1e-5, dim, ORDERS,
                                           l2_clip)
  for alpha in (2, 8):
    config = found.configurations[alpha]
    again = _recomputed(mech, config, alpha)
    assert found[alpha] <= again * (1 + 1e-9) + 1e-12
    assert found[alpha] >= again * (1 - 1e-6)
    assert found[alpha] <= accountant.rdp[alpha] * (1 + 1e-12)
    for i in range(len(config.pairs)):
      assert sum(m for m, _ in config.others_at(i)) == n - 1
    assert sum(k for k, _, _ in config.pairs) == dim


def _clients(others):
  """The n - 1 others' inputs, client by client, from ((clients, input), ...)."""
  return [v for m, v in others for _ in range(m)]


@pytest.mark.parametrize('name', ['rqm', 'qmgeo', 'quantized_gaussian'])
def test_l2_route_inputs_are_clipped_updates(name):
  """Target pair and every other client: in [-c, c] in every coordinate, with
  ℓ2 norm <= l2_clip (the others may sit higher where the target moves in
  few coordinates: their norm is over every group)."""
  dim, l2, n = 400, 1.0, 10
  c = 4 / math.sqrt(dim)
  mech = MECHANISMS[name](c)
  found = attained.round_rdp(mech, ORDERS, n, dim, l2)
  for config in found.configurations.values():
    for side in (1, 2):
      norm = math.sqrt(sum(p[0] * p[side]**2 for p in config.pairs))
      assert norm <= l2 * (1 + 1e-9)
      assert all(abs(p[side]) <= c * (1 + 1e-12) for p in config.pairs)
    groups = [_clients(config.others_at(i)) for i in range(len(config.pairs))]
    for client in range(n - 1):
      values = [g[client] for g in groups]
      assert all(abs(v) <= c * (1 + 1e-12) for v in values)
      norm = math.sqrt(sum(p[0] * v**2 for p, v in zip(config.pairs, values)))
      assert norm <= l2 * (1 + 1e-9)


def test_others_follow_the_target_into_few_coordinates():
  """QMGeo at 4 bits of the FL table (16 levels on ±16c, p = 0.46; d =
  8,192, n = 100, ℓ2 clip 1, c = 3/√d): the target moving end to end in
  910 coordinates with every other client at +c there and 0 elsewhere (each
  a clipped update) attains D_2 = 1.645 per round, against 1.582 with the
  others at l2_clip/√d everywhere; within 1.5% of the proved bound."""
  dim, n = 8192, 100
  c = 3 / math.sqrt(dim)
  mech = mechanisms.QMGeo(c, 16, 0.4583395600612428, full_support=True,
                          level_range=16 * c)
  found = attained.round_rdp(mech, [2, 3], n, dim, 1.0)
  config = found.configurations[2]
  assert config.pair_others is not None
  assert found.describe(2) == (
      'target 910 coordinates at (+1c, -1c), others 99 at +1c there and '
      '7282 coordinates at (+0c, +0c), others 99 at +0c there')
  again = _recomputed(mech, config, 2)
  assert again * (1 - 1e-6) <= found[2] <= again * (1 + 1e-9)
  assert found[2] > 1.64
  proved = secure_sum.vector_rdp(mech, [2, 3], n, dim, 2.0)
  assert found[2] <= proved[2] <= 1.015 * found[2]


def test_the_others_at_plus_minus_c_are_not_the_worst_case():
  """RQM, 16 levels, Δ = c, q = 0.42, n = 40, α = 2: every other client at
  the level next to +c beats every ±c mix (the papers' setting)."""
  mech = MECHANISMS['rqm'](1.0)
  found = attained.round_rdp(mech, ORDERS, 40)
  mixes = divergence.renyi_divergence_of_sum(mech, 2.0, 40).value
  assert found[2] > mixes * 1.03
  assert found.describe(2) == ('target 1 coordinate at (+1c, -1c); others 39 '
                               'at +0.9333c')


def test_guarantee_reads_an_interval():
  mech = MECHANISMS['rqm'](1.0)
  g = composition.training_guarantee(mech, 20, 10, 500, 1e-5, dim=5)
  assert g.epsilon_attained <= g.epsilon
  assert g.slack >= 1
  assert f'ε ∈ [{g.epsilon_attained:.4g}, {g.epsilon:.4g}]' in g.summary()
  assert 'others 9 at' in g.attained_inputs
  skipped = composition.training_guarantee(mech, 20, 10, 500, 1e-5, dim=5,
                                           attained=False)
  assert skipped.epsilon_attained is None and skipped.slack is None


def test_closed_forms_attain_their_own_bound():
  """The Gaussian's divergences are exact: attained = proved."""
  mech = mechanisms.get('gaussian')(1.0, 2.0)
  g = composition.training_guarantee(mech, 20, 10, 500, 1e-5, dim=5)
  assert g.epsilon_attained == pytest.approx(g.epsilon, rel=1e-12)


@pytest.mark.parametrize('kwargs, match', [
    (dict(clients_per_round=0), 'clients_per_round'),
    (dict(dim=0), 'dim'),
    (dict(l2_clip=-1.0), 'l2_clip'),
    (dict(orders=[1]), 'orders'),
])
def test_bad_input(kwargs, match):
  args = dict(mech=MECHANISMS['rqm'](1.0), orders=ORDERS, clients_per_round=4)
  args.update(kwargs)
  with pytest.raises((ValueError, TypeError), match=match):
    attained.round_rdp(**args)


def test_the_screens_cut_law_keeps_exact_zero_ends_and_point_masses(
    monkeypatch):
  """The FFT route (calibration's screen) resolves the others' law only down
  to SCREEN_TAIL. Off-support ends (exact zeros) are not a cut: QMGeo
  without full support, 29 others, gives the same figures as the law in
  full; and 199 others whose law is one point (QMGeo at 256 levels) give
  the uncut figures rather than an empty window."""
  fft_route = secure_sum.Limits(attained_operations=0.0)
  def figures(mech, n, tail):
    monkeypatch.setattr(attained, 'SCREEN_TAIL', tail)
    return attained.round_rdp(mech, [2, 8], n, search=False, limits=fft_route)
  mech = mechanisms.QMGeo(1.0, 8, 0.5)
  cut, whole = figures(mech, 30, 400.0), figures(mech, 30, math.inf)
  for order in whole:
    assert cut[order] == pytest.approx(whole[order], rel=1e-9, abs=1e-12)
  point = mechanisms.QMGeo(1.0, 256, 0.3)
  assert figures(point, 200, 400.0) == figures(point, 200, math.inf)
