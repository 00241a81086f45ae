"""Tests for tff_quant/accounting/attained.py: each figure is what its named
inputs attain (recomputed independently), never above the proved bound, on
clipped updates on the ℓ2 route; and guarantees print ε ∈ [attained, proved]."""

import math

import numpy as np
import pytest
from scipy import special
from scipy import stats

from tff_quant import mechanisms
from tff_quant.accounting import attained
from tff_quant.accounting import composition
from tff_quant.accounting import divergence
from tff_quant.accounting import secure_sum
from tff_quant.accounting.secure_sum import curve

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


# --- Modular sums (ddgauss, skellam): named inputs, not the proved value ----

def _wrapped_noise(name, sigma, modulus):
  """One client's noise mod M from its definition (not the mechanism's
  code): the discrete Gaussian ∝ exp(-z²/2σ²), or Skellam = Poisson(σ²/2) -
  Poisson(σ²/2) (scipy), over |z| <= 20M, wrapped."""
  z = np.arange(-20 * modulus, 20 * modulus + 1)
  if name == 'ddgauss':
    p = np.exp(-z.astype(float)**2 / (2 * sigma**2))
  else:
    p = stats.skellam.pmf(z, sigma**2 / 2, sigma**2 / 2)
  return np.bincount(z % modulus, weights=p, minlength=modulus) / p.sum()


def _brute_law(name, mech, x, clients):
  """Law of the n-client sum mod M, the target at x and the others at 0:
  the target's stochastic rounding of x/γ (two levels) and each client's
  noise, convolved one client at a time (direct sums)."""
  m = mech.modulus
  y = x / mech.gamma
  j = math.floor(y)
  law = np.zeros(m)
  law[j % m] += 1 - (y - j)
  law[(j + 1) % m] += y - j
  noise = _wrapped_noise(name, mech.noise_std, m)
  for _ in range(clients):
    law = np.array([np.dot(law, noise[(k - np.arange(m)) % m])
                    for k in range(m)])
  return law


def _brute_rdp(name, mech, config, alpha, clients):
  """The configuration's round D_α, Σ over its groups of count·D_α of the
  brute-force laws (D∞ where alpha is inf), in log space (every entry of
  these laws is positive: all sums of positive terms)."""
  total = 0.0
  for k, x, y in config.pairs:
    p, q = (_brute_law(name, mech, v, clients) for v in (x, y))
    if math.isinf(alpha):
      total += k * max(np.max(np.log(p) - np.log(q)), 0.0)
    else:
      total += k * special.logsumexp(alpha * np.log(p) + (1 - alpha) *
                                     np.log(q)) / (alpha - 1)
  return total


MODULAR = ('ddgauss', 'skellam')


@pytest.mark.parametrize('name', MODULAR)
@pytest.mark.parametrize('steps', [2, 4, 8])
def test_modular_attained_end_is_what_named_inputs_attain_below_the_proof(
    name, steps):
  """Coarse rounding (r = 2-8 steps, σ = 1 step, M = 64), n = 3, d = 1,000,
  ℓ2 clip 1, c = 3/√d: every figure is the brute-force D_α of the inputs it
  names (direct sums from the noise's definition), those inputs are clipped
  updates, and the proved bound (the chord majorant over the box) is above
  it at every order, by more than 5% at α = 8 (9-49% measured)."""
  dim, n, l2 = 1000, 3, 1.0
  c = 3 * l2 / math.sqrt(dim)
  mech = mechanisms.get(name)(c, 64, steps, 1.0)
  acc = composition.RoundAccountant(mech, n, 300, 1e-5, dim, ORDERS, l2)
  found = acc.attained
  for alpha in (2, 8, math.inf):
    config = found.configurations[alpha]
    again = _brute_rdp(name, mech, config, alpha, n)
    assert again * (1 - 1e-6) <= found[alpha] <= again * (1 + 1e-9)
    assert config.others == ((n - 1, 0.0),)
    assert sum(k for k, _, _ in config.pairs) == dim
    for side in (1, 2):
      assert math.sqrt(sum(p[0] * p[side]**2 for p in config.pairs)) <= l2 * (
          1 + 1e-12)
      assert all(abs(p[side]) <= c * (1 + 1e-12) for p in config.pairs)
  for alpha, value in found.items():
    assert value <= acc.rdp[alpha] * (1 + 1e-12)
  assert found[8] < acc.rdp[8] / 1.05


@pytest.mark.parametrize('name', MODULAR)
@pytest.mark.parametrize('l2_clip, n', [(None, 4), (None, 1), (1.0, 1),
                                        (1.0, 10)])
def test_modular_attained_end_never_exceeds_the_proof(name, l2_clip, n):
  """attained <= proved at every order, on both routes, n = 1 too (the
  coordinate route: the two agree to the lower rounding of the power sums);
  the coordinate route names (+c, -c) in every coordinate."""
  dim = 50
  c = 0.5 if l2_clip is None else 4 / math.sqrt(dim)
  mech = mechanisms.get(name)(c, 128, 8, 3.0)
  acc = composition.RoundAccountant(mech, n, 100, 1e-5, dim, ORDERS, l2_clip)
  for alpha, value in acc.attained.items():
    assert 0 < value <= acc.rdp[alpha] * (1 + 1e-12)
  if l2_clip is None:
    assert acc.attained[2] >= acc.rdp[2] * (1 - 1e-6)
    assert acc.attained.describe(2).startswith(
        'target 50 coordinates at (+1c, -1c)')


def _lattice_hull(mech, n, dim, l2_clip, alpha):
  """d·(concave hull of u ↦ D_α(W‖W shifted by j) over u = (jγ)², every
  integer shift j in [0, 2r]) at u* = S²/d, S = 2·l2_clip: what splits of the
  ℓ2 budget over lattice shifts can reach (np.roll and the divergence of
  `divergence.renyi_divergence`, not the attained module)."""
  w = mech.noise_sum_log_pmf(n)
  shifts = np.arange(2 * mech.steps + 1)
  f = np.array([divergence.renyi_divergence(w, np.roll(w, j), alpha)
                for j in shifts])
  u = (shifts * mech.gamma)**2
  return dim * curve.concave_majorant_at(u, f, 4 * l2_clip**2 / dim)


@pytest.mark.parametrize('steps, noise_fraction, gap', [
    (128, 0.009618738696082811, 7.7e-4),   # skellam, ε = 10
    (64, 0.010984841487179877, 1.6e-3)])   # skellam, ε = 3
def test_served_modular_cells_differ_by_the_chord_gap(steps, noise_fraction,
                                                     gap):
  """The FL table's 16-bit Skellam cells (M = 65,536, n = 100 of 3,400,
  d = 8,192, ℓ2 clip 0.518, c = 3·clip/√d): the attained end reaches the
  concave hull of the lattice shifts' divergences (to the lower rounding
  of the power sums, and 1/(4nσ²) where a shift is odd), so the interval's
  width is the chord majorant's gap over that hull: 7.7e-4 (r = 128) and
  1.6e-3 (r = 64) at α = 2."""
  dim, n, l2 = 8192, 100, 0.518
  mech = mechanisms.get('skellam').for_coordinate_bound(
      3 * l2 / math.sqrt(dim), num_levels=65536, steps=steps,
      noise_fraction=noise_fraction)
  acc = composition.RoundAccountant(mech, n, 3400, 1 / 3400, dim, (2, 3),
                                    l2)
  hull = _lattice_hull(mech, n, dim, l2, 2)
  assert hull * (1 - 5e-5) <= acc.attained[2] <= hull * (1 + 1e-9)
  assert acc.rdp[2] / acc.attained[2] - 1 == pytest.approx(gap, rel=0.05)
  assert 'others 99 at +0c' in acc.attained.describe(2)


def test_modular_guarantee_names_its_inputs():
  """A modular sum's guarantee reads ε ∈ [attained, proved] with the
  attained end below the proved one and the inputs named."""
  dim, l2 = 1000, 1.0
  mech = mechanisms.get('skellam')(3 * l2 / math.sqrt(dim), 64, 4, 1.0)
  g = composition.training_guarantee(mech, 10, 3, 300, 1e-5, dim=dim,
                                     orders=ORDERS, l2_clip=l2, use_pld=False)
  assert g.epsilon_attained < g.epsilon / 1.05
  assert g.attained_inputs.startswith('target ')
  assert g.attained_inputs.endswith('others 2 at +0c')
  assert f'ε ∈ [{g.epsilon_attained:.4g}, {g.epsilon:.4g}]' in g.summary()
