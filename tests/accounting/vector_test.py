"""Tests for the ℓ2 route (tff_quant/accounting/vector.py)."""

import dataclasses
import itertools
import math

import numpy as np
import pytest

from tff_quant import mechanisms
from tff_quant.accounting import calibration
from tff_quant.accounting import composition
from tff_quant.accounting import divergence
from tff_quant.accounting import matrix_sums
from tff_quant.accounting import others as others_lib
from tff_quant.accounting import vector

ORDERS = (2.0, 8.0, math.inf)


def _mech(name, c=1.0, **params):
  return mechanisms.get(name).for_coordinate_bound(c, **params)


def _exact(mech, x, x_prime, others, alpha):
  """D_α of the secure sum, target at x vs x', the others at the given inputs."""
  rest = [(mech.log_pmf(o), 1) for o in others]
  p = divergence.sum_log_pmf([(mech.log_pmf(x), 1)] + rest)
  q = divergence.sum_log_pmf([(mech.log_pmf(x_prime), 1)] + rest)
  return divergence.renyi_divergence(p, q, alpha)


@pytest.mark.parametrize('name', ['rqm', 'qmgeo', 'bq', 'pbm',
                                  'quantized_gaussian', 'randomized_projection'])
def test_piecewise_affine_declaration_holds(name):
  params = dict(bq=dict(s=3, m=8), pbm=dict(num_levels=2),
                qmgeo=dict(range_ratio=4.0),
                quantized_gaussian=dict(lattice=5, num_levels=8),
                randomized_projection=dict(lattice=5, bits=3)).get(name, {})
  mech = _mech(name, **params)
  assert mech.piecewise_affine
  b = np.unique(mech.critical_inputs())
  for lo, hi in zip(b[:-1], b[1:]):
    for s in (0.0, 0.25, 0.5, 0.9, 1.0):
      mixed = (1 - s) * mech.pmf(lo) + s * mech.pmf(hi)
      np.testing.assert_allclose(mech.pmf(lo + s * (hi - lo)), mixed, atol=1e-12)
  assert not _mech('qmgeo', full_support=False).piecewise_affine
  assert not _mech('pbm', num_levels=3).piecewise_affine


@pytest.mark.parametrize('theta, n', [(0.01, 40), (0.001, 100)])
def test_pbm_trial_reduction_is_near_the_exact_mixes_and_beats_envelopes(
    theta, n, monkeypatch):
  """PBM (16 levels) as 15 independent one-trial PBMs: above every exact ±c mix
  (it holds for any others), within 3% of them at calibrated θ, and far below
  the cell envelopes it replaces (their spread per cell dominates there)."""
  mech = _mech('pbm', num_levels=16, theta=theta)
  assert mech.sum_reduction(n).copies == 15
  grid = vector.distance_grid(1.0, 8)
  split = vector.divergence_curve(mech, [2.0, 8.0], n, t_grid=grid)
  for a in (2.0, 8.0):
    mixes = divergence.renyi_divergence_of_sum(mech, a, n).value
    assert mixes * (1 - 1e-9) <= split.values[a][-1] <= 1.03 * mixes
  monkeypatch.setattr(type(mech), '_sum_reduction', lambda self, n: None)
  envelopes = vector.divergence_curve(mech, [2.0], n, t_grid=grid)
  assert np.all(envelopes.values[2.0] >= 4 * split.values[2.0])


def test_interior_targets_can_beat_the_ends():
  """Why targets range over every critical input: RQM at n = 1, α = 8."""
  mech = _mech('rqm')
  curve = vector.divergence_curve(mech, [8.0], 1, t_points=8)
  at_ends = divergence.renyi_divergence_of_sum(mech, 8.0, 1).value
  assert curve.values[8.0][-1] == pytest.approx(5.344228585, abs=1e-8)
  assert at_ends == pytest.approx(5.315642348, abs=1e-8)


@pytest.mark.parametrize('name', ['rqm', 'qmgeo', 'pbm', 'quantized_gaussian'])
@pytest.mark.parametrize('n', [1, 3])
def test_full_flip_covers_the_coordinate_route(name, n):
  mech = _mech(name)
  curve = vector.divergence_curve(mech, ORDERS, n, t_points=8)
  for alpha in (2.0, 8.0):
    at_ends = divergence.renyi_divergence_of_sum(mech, alpha, n).value
    assert curve.values[alpha][-1] >= at_ends * (1 - 1e-12)
  assert curve.values[math.inf][-1] == pytest.approx(
      divergence.epsilon_infinity(mech), rel=1e-9)


@pytest.mark.parametrize('name, params', [
    ('rqm', {}), ('pbm', {}), ('quantized_gaussian', {}), ('qmgeo', {}),
    # The paper's quantized Gaussian (cell envelopes + the local bound), the
    # lattice variants with a wide quantizer range, and QMGeo's level range.
    ('quantized_gaussian', dict(lattice=0)),
    ('quantized_gaussian', dict(range_ratio=8.0, noise_multiplier=0.5)),
    ('randomized_projection', dict(range_ratio=4.0, q=0.6)),
    ('randomized_projection', dict(lattice=0)),
    ('qmgeo', dict(range_ratio=8.0, p=0.2)),
], ids=lambda v: v if isinstance(v, str) else str(v))
def test_curve_bounds_random_pairs(name, params):
  """f̄(t_s) >= D_α at random target pairs within t_s, the others in every ±c
  mix and at random inputs (the default bound holds for any): the brute-force
  soundness check, n = 3, of every route a mechanism takes."""
  mech, n = _mech(name, **params), 3
  curve = vector.divergence_curve(mech, ORDERS, n, t_points=8, cells=32)
  rng = np.random.default_rng(0)
  for s, t in enumerate(curve.t):
    for _ in range(6):
      x = rng.uniform(-1, 1)
      x_prime = float(np.clip(x + rng.uniform(-t, t), -1, 1))
      mixes = [[1.0] * plus + [-1.0] * (n - 1 - plus) for plus in range(n)]
      for others in mixes + [list(rng.uniform(-1, 1, n - 1)) for _ in range(2)]:
        for alpha in ORDERS:
          true = _exact(mech, x, x_prime, others, alpha)
          assert true <= curve.values[alpha][s] * (1 + 1e-9) + 1e-12, (t, x, x_prime)


@pytest.mark.parametrize('name', ['rqm', 'qmgeo', 'pbm'])
@pytest.mark.parametrize('n', [2, 3])
def test_others_at_extremes_are_the_worst_over_critical_inputs(name, n):
  """Item 2's search: every multiset of critical inputs for the others, every
  target pair of critical inputs; none beats the ±c mixes others='extremes'
  assumes."""
  mech = _mech(name)
  crit = np.unique(mech.critical_inputs())
  crit = crit[np.unique(np.linspace(0, len(crit) - 1, 7).round().astype(int))]
  for alpha in (2.0, 8.0):
    accounted = vector.divergence_curve(mech, [alpha], n, t_points=8,
                                        others='extremes').values[alpha][-1]
    worst = max(_exact(mech, x, y, others, alpha)
                for x in crit for y in crit
                for others in itertools.combinations_with_replacement(crit, n - 1))
    assert worst <= accounted * (1 + 1e-9)


def _bound_at(curve, alpha, t):
  """The curve's bound on f_α(t): its step points' value on the step holding t²."""
  us, ys = curve.bound_points(alpha)
  return ys[np.clip(np.searchsorted(us, t**2, side='left') - 1, 0, len(ys) - 1)]


def test_majorant_is_concave_monotone_and_above_the_bound():
  curve = vector.divergence_curve(_mech('rqm'), ORDERS, 2, t_points=16)
  fine = vector.divergence_curve(_mech('rqm'), ORDERS, 2, t_grid=np.linspace(
      0.005, 2, 400))
  for alpha in ORDERS:
    u = np.linspace(0, 4, 401)
    g = np.array([curve.majorant(alpha, v) for v in u])
    assert np.all(np.diff(g) >= -1e-12)
    assert np.all(np.diff(g, 2) <= 1e-9)
    assert np.all(g >= [_bound_at(curve, alpha, math.sqrt(v)) - 1e-12 for v in u])
    # Above the exact f at 400 distances (vertex targets are exact at each).
    for t, f in zip(fine.t, fine.values[alpha]):
      assert curve.majorant(alpha, t**2) >= f * (1 - 1e-9) - 1e-12


@pytest.mark.parametrize('name', ['rqm', 'qmgeo', 'bq'])
def test_chord_bound_holds_between_grid_points(name):
  """Between grid points the chord (not the step) bounds f_α: checked against
  exact D_α at random pairs and distances, others in every ±c mix."""
  mech = _mech(name, s=3, m=8) if name == 'bq' else _mech(name, num_levels=8)
  n = 2
  grid = vector.with_breakpoints(mech, vector.distance_grid(1.0, 8), 64, n)
  curve = vector.divergence_curve(mech, ORDERS, n, t_grid=grid)
  assert curve.convex_on.all()   # every breakpoint is on the grid
  rng = np.random.default_rng(1)
  checked = 0
  for _ in range(120):
    t = rng.uniform(0, 2)
    x = rng.uniform(-1, 1 - t) if t < 2 else -1.0
    if x < -1:
      continue
    for flip in (False, True):
      a, b = (x + t, x) if flip else (x, x + t)
      for plus in range(n):
        others = [1.0] * plus + [-1.0] * (n - 1 - plus)
        for alpha in ORDERS:
          true = _exact(mech, a, b, others, alpha)
          assert true <= _bound_at(curve, alpha, t) * (1 + 1e-9) + 1e-12, (t, a, b)
          checked += 1
  assert checked > 500


def test_chord_bound_is_tighter_than_steps():
  """The chord bound on breakpoint-free intervals: the ℓ2 route's round RDP for
  RQM (16 levels, c = 3·clip/√d) drops by more than a quarter."""
  dim, clip = 400, 1.0
  mech = _mech('rqm', c=3 * clip / math.sqrt(dim), num_levels=16, delta_ratio=4.0,
               q=0.1)
  chords = vector.vector_rdp(mech, [8.0], 10, dim, 2 * clip)
  u = 4 * clip**2 / dim
  grid = vector.focused_grid(mech.input_bound, math.sqrt(u), 24)
  steps = vector.divergence_curve(mech, [8.0], 10, t_grid=grid)
  steps.convex_on = None
  assert chords[8.0] < 0.75 * dim * steps.majorant(8.0, u)


def test_order_ladder_rounds_up():
  orders = list(range(2, 65)) + [math.inf]
  rungs = vector.order_ladder(orders)
  assert rungs[0] == 2 and rungs[-2] == 64 and rungs[-1] == math.inf
  assert len(rungs) < 20
  assert all(any(r >= a for r in rungs) for a in orders)


def test_vector_rdp_reduces_to_the_coordinate_route():
  dim, clip = 50, 1.0
  mech = _mech('rqm', c=clip / math.sqrt(dim))
  rdp = vector.vector_rdp(mech, [2, 8, math.inf], 4, dim, 2 * clip, t_points=8)
  coord = composition.per_round_rdp(mech, 4, dim, orders=[8])
  # Same d × full-flip value; targets over every critical input can only add.
  assert coord[2] * (1 - 1e-12) <= rdp[2] <= coord[2] * 1.01
  assert coord[8] * (1 - 1e-12) <= rdp[8] <= coord[8] * 1.01
  assert rdp[math.inf] == pytest.approx(coord[math.inf], rel=1e-9)


def test_l2_route_charges_a_fraction_of_the_range():
  dim, clip, n = 400, 1.0, 5
  wide = _mech('rqm', c=3 * clip / math.sqrt(dim))
  l2 = vector.vector_rdp(wide, [2, 8], n, dim, 2 * clip, t_points=12)
  full = composition.per_round_rdp(wide, n, dim, orders=[8])
  assert l2[2] < 0.6 * full[2] and l2[8] < 0.6 * full[8]
  # Never below the truth at one admissible input pair: S/√d on every coordinate.
  t = 2 * clip / math.sqrt(dim)
  c = wide.input_bound
  for plus in range(n):
    others = [c] * plus + [-c] * (n - 1 - plus)
    assert dim * _exact(wide, c, c - t, others, 2.0) <= l2[2] * (1 + 1e-9)


def test_accountant_takes_l2_clip():
  dim, clip, schedule = 400, 1.0, dict(rounds=5, clients_per_round=5,
                                       total_clients=100, delta=1e-5)
  wide = _mech('rqm', c=3 * clip / math.sqrt(dim), q=0.1)
  g_l2 = composition.training_guarantee(wide, dim=dim, l2_clip=clip,
                                        orders=range(2, 17), **schedule)
  g_box = composition.training_guarantee(wide, dim=dim, orders=range(2, 17),
                                         use_pld=False, **schedule)
  assert g_l2.epsilon < g_box.epsilon
  assert 'ℓ2 route' in g_l2.assumptions and 'PLD route not used' in g_l2.pld_note
  narrow = _mech('rqm', c=clip / math.sqrt(dim), q=0.1)
  same = composition.RoundAccountant(narrow, 5, 100, 1e-5, dim, range(2, 9),
                                     l2_clip=clip)
  assert not same.l2_route


def test_calibrate_with_l2_clip_meets_the_target():
  dim, clip = 200, 1.0
  schedule = dict(delta=1e-5, rounds=3, clients_per_round=4, total_clients=100,
                  dim=dim)
  mech = calibration.calibrate('rqm', 50.0, **schedule, l2_clip=clip,
                               coordinate_clip=3 * clip / math.sqrt(dim))
  assert mech.input_bound == pytest.approx(3 * clip / math.sqrt(dim))
  eps = composition.training_guarantee(mech, l2_clip=clip, use_pld=False,
                                       orders=calibration.FAST_ORDERS,
                                       **schedule).epsilon
  assert eps <= 50.0
  with pytest.raises(ValueError, match='coordinate_clip'):
    calibration.calibrate('rqm', 50.0, **schedule, clip=1.0, coordinate_clip=2.0)


@pytest.mark.parametrize('kwargs,match', [
    (dict(l2_sensitivity=0.0), 'l2_sensitivity'),
    (dict(l2_sensitivity=float('nan')), 'l2_sensitivity'),
    (dict(orders=[1.0]), 'orders'),
    (dict(dim=0), 'dim'),
])
def test_bad_input(kwargs, match):
  args = dict(mech=_mech('rqm'), orders=[2], clients_per_round=2, dim=4,
              l2_sensitivity=1.0)
  args.update(kwargs)
  with pytest.raises(ValueError, match=match):
    vector.vector_rdp(**args)
  with pytest.raises(ValueError, match='t_grid'):
    vector.divergence_curve(_mech('rqm'), [2], 2, t_grid=np.array([0.5, 1.0]))
  with pytest.raises(ValueError, match='l2_clip'):
    composition.RoundAccountant(_mech('rqm'), 2, 10, 1e-5, 4, l2_clip=-1.0)
  for bad in (0, 1.5):
    with pytest.raises((ValueError, TypeError), match='`num_clients`'):
      vector.with_breakpoints(_mech('pbm'), vector.distance_grid(1.0, 8), 64, bad)
    with pytest.raises((ValueError, TypeError), match='`num_clients`'):
      vector.l2_grid(_mech('rqm'), 0.1, 24, bad)


def test_refuses_a_too_costly_evaluation_before_starting(monkeypatch):
  monkeypatch.setattr(vector, 'MAX_OPERATIONS', 1e3)
  with pytest.raises(ValueError, match='operations'):
    vector.divergence_curve(_mech('rqm'), [2], 40)


@pytest.mark.parametrize('mech', [mechanisms.RQM(1.0, 1.0, 8, 0.42),
                                  mechanisms.PBM(1.0, 8, 0.25)])
@pytest.mark.parametrize('others', vector.OTHERS)
def test_grouped_splits_of_the_others_bound_every_split(mech, others,
                                                       monkeypatch):
  """Groups of mixes (extremes) or of the others' common-part count (any) are
  bounded by their first member; the default grouping loses little."""
  orders, grid = [2.0, 8.0], vector.distance_grid(1.0, 8)
  curve = lambda k: vector.divergence_curve(mech, orders, 40, t_grid=grid,
                                            exact_splits=k, others=others)
  coarse, default = curve(1), curve(vector.EXACT_SPLITS)
  monkeypatch.setattr(others_lib, 'REFINE', 0.0)   # every count evaluated alone
  every = curve(40)
  for a in orders:
    assert np.all(coarse.values[a] >= every.values[a] * (1 - 1e-12))
    assert np.all(default.values[a] >= every.values[a] * (1 - 1e-12))
    # The default (singles next to the anchors) loses under 2% here.
    assert np.all(default.values[a] <= every.values[a] * 1.02)


def test_power_sums_in_pair_blocks_equal_one_block(monkeypatch):
  """Memory is bounded by computing the pairs in blocks; the curve is unchanged."""
  mech = mechanisms.RQM(1.0, 1.0, 8, 0.42)
  whole = vector.divergence_curve(mech, [2.0, 8.0], 5, t_points=8)
  monkeypatch.setattr(matrix_sums, '_BLOCK', 50)   # a few pairs per block
  blocked = vector.divergence_curve(mech, [2.0, 8.0], 5, t_points=8)
  # Same exact curve; only the blocks differ: each `convolve` block's scale
  # (exp's arguments round differently) and the shapes BLAS sees (its
  # summation order, which differs between CPUs, e.g. AVX2 and AVX-512
  # kernels). So the two agree to rounding, bounded by what matrix_sums
  # proves: each computed log power sum is within its allowance of exact,
  # u·((2α-1)·(convolutions' error) + 4,960 + terms) (`_allowance`), here at
  # most 28,600u at α = 2 and 122,700u at α = 8 (4 convolutions of <= 9
  # terms, up to 7,800u; <= 24 terms per power sum); f̄_α is that log divided
  # by α - 1 (max and chords do not enlarge a difference), and the two runs
  # differ by at most twice it: 57,200u = 6.4e-12 (α = 2), 35,100u (α = 8).
  # A relative tolerance is wrong here: near t = 0, f̄_α ≈ C·t² (3.3e-6 on
  # this grid) is the log of a sum within 1e-5 of 1, so a rounding of u in
  # that sum is 3e-11 of it (rtol=1e-12 failed at 2.4e-12 on an AMD EPYC).
  u = 2.0**-53
  for order, bound in ((2.0, 57_200 * u), (8.0, 35_100 * u)):
    np.testing.assert_allclose(blocked.values[order], whole.values[order],
                               rtol=0, atol=bound)


@pytest.mark.parametrize('name', ['rqm', 'pbm', 'qmgeo', 'quantized_gaussian', 'bq',
                                  'randomized_projection'])
def test_common_part_lies_below_every_input_law(name):
  """The common part is a min over every input in [-c, c] (the critical inputs
  attain it): checked on 801 inputs."""
  mech = _mech(name, s=3, m=8) if name == 'bq' else _mech(name)
  log_beta, log_r = vector.common_part(mech)
  assert 0 < math.exp(log_beta) <= 1
  assert np.exp(log_r).sum() == pytest.approx(1.0, abs=1e-12)
  for x in np.linspace(-1, 1, 801):
    assert np.all(log_beta + log_r <= mech.log_pmf(x) + 1e-12)


def test_any_others_is_close_to_the_extremes_where_the_laws_overlap():
  """Calibrated regime (RQM Δ = 32c, 40 clients): the proved bound is within 8%
  of every exact ±c mix (which it must exceed); at the papers' low noise it
  is valid but much looser."""
  grid = vector.distance_grid(1.0, 8)
  noisy = _mech('rqm', num_levels=16, delta_ratio=32, q=0.073)
  for mech, hi in ((noisy, 1.08), (_mech('rqm'), 20.0)):
    any_ = vector.divergence_curve(mech, [2.0, 8.0], 40, t_grid=grid)
    ext = vector.divergence_curve(mech, [2.0, 8.0], 40, t_grid=grid,
                                  others='extremes')
    for a in (2.0, 8.0):
      mixes = divergence.renyi_divergence_of_sum(mech, a, 40).value
      assert mixes * (1 - 1e-9) <= any_.values[a][-1] <= hi * mixes
      assert ext.values[a][-1] >= mixes * (1 - 1e-9)


def test_bad_others_is_refused():
  with pytest.raises(ValueError, match='others'):
    vector.divergence_curve(_mech('rqm'), [2.0], 3, t_points=8, others='ends')
  with pytest.raises(ValueError, match='others'):
    composition.training_guarantee(_mech('rqm'), 5, 3, 10, 1e-5, others='ends')


def test_local_bound_caps_the_envelopes_and_replaces_a_refused_search(
    monkeypatch):
  """The quantized Gaussian: each grid value is at most α t²/(2σ²); with the
  search over the cost limit, that bound is the curve (and costs nothing)."""
  mech = _mech('quantized_gaussian', num_levels=8, noise_multiplier=0.5,
               lattice=0)   # the paper's: envelopes and the local bound
  grid = vector.distance_grid(1.0, 8)
  local = mech.local_divergences([2.0, 8.0], grid)
  searched = vector.divergence_curve(mech, [2.0, 8.0], 5, t_grid=grid)
  assert 'local' in searched.method
  for a in (2.0, 8.0):
    assert np.all(searched.values[a] <= local[a])
  assert np.any(searched.values[2.0] < local[2.0])   # the search wins somewhere
  assert vector.estimated_operations(mech, 5, 2, len(grid)) > 0
  monkeypatch.setattr(vector, 'MAX_OPERATIONS', 1.0)
  assert vector.estimated_operations(mech, 5, 2, len(grid)) == 0.0
  refused = vector.divergence_curve(mech, [2.0, 8.0], 5, t_grid=grid)
  assert refused.method.startswith('local')
  np.testing.assert_array_equal(refused.values[8.0], local[8.0])
  with pytest.raises(vector.CostError):   # no local bound: still refused
    vector.divergence_curve(_mech('rqm'), [2.0], 5, t_grid=grid)
  # A sub-sum would fit, but the instant local bound is preferred to it.
  cost = lambda n: vector._search_operations(mech, n, 2, len(grid),
                                             vector.DEFAULT_CELLS)
  monkeypatch.setattr(vector, 'MAX_OPERATIONS', (cost(2) + cost(3)) / 2)
  assert vector.estimated_operations(mech, 5, 2, len(grid)) == 0.0
  assert vector.divergence_curve(mech, [2.0], 5, t_grid=grid).method.startswith(
      'local')


def test_bq_reduces_to_one_client_with_every_clients_noise():
  """BQ's curve is one client's with Binomial(n·m, 1/2) noise: infinite at
  every t > 0 (a pair straddling a grid point has different supports), as
  the exact sum with the others at ±c is."""
  mech = _mech('bq', s=2, m=20)
  curve = vector.divergence_curve(mech, [2.0], 40, t_grid=vector.distance_grid(
      1.0, 8))
  assert 'Binomial(20, 1/2) noise' in curve.method and curve.num_clients == 40
  assert np.all(np.isinf(curve.values[2.0]))
  # Priced as one client's law (no convolution), not n clients' sum.
  one = vector.estimated_operations(mech, 1, 1, 8)
  assert vector.estimated_operations(mech, 40, 1, 8) < 2 * 40 * one
  assert math.isinf(divergence.renyi_divergence_of_sum(mech, 2.0, 40).value)


def test_over_the_limit_the_largest_affordable_sub_sum_is_searched(monkeypatch):
  """f_α(n) <= f_α(n') for n' <= n (the other clients' outputs dropped): with
  the limit between the costs of 2 and 3 clients, n = 6 is searched as n' = 2,
  an upper bound on the exact 6-client curve and at most the 1-client one."""
  mech = _mech('rqm', num_levels=8)
  grid = vector.distance_grid(1.0, 8)
  orders = [2.0, 8.0]
  exact = vector.divergence_curve(mech, orders, 6, t_grid=grid)
  two = vector.divergence_curve(mech, orders, 2, t_grid=grid)
  one = vector.divergence_curve(mech, orders, 1, t_grid=grid)
  cost = lambda n: vector._search_operations(mech, n, 2, len(grid),
                                             vector.DEFAULT_CELLS)
  monkeypatch.setattr(vector, 'MAX_OPERATIONS', (cost(2) + cost(3)) / 2)
  assert vector.affordable_clients(mech, 6, 2, len(grid)) == 2
  assert vector.estimated_operations(mech, 6, 2, len(grid)) == cost(2)
  sub = vector.divergence_curve(mech, orders, 6, t_grid=grid)
  assert 'the target and 1 of the 5 others searched' in sub.method
  assert sub.num_clients == 6
  for a in orders:
    np.testing.assert_array_equal(sub.values[a], two.values[a])
    assert np.all(exact.values[a] <= sub.values[a] * (1 + 1e-12))
    assert np.all(sub.values[a] <= one.values[a] * (1 + 1e-12))
  assert np.any(exact.values[2.0] < 0.9 * sub.values[2.0])   # the price of dropping
  for bad, name in ((dict(num_clients=0), 'num_clients'),
                    (dict(num_orders=-1), 'num_orders')):
    args = dict(dict(num_clients=6, num_orders=2, t_points=len(grid)), **bad)
    with pytest.raises(ValueError, match=f'`{name}`'):
      vector.affordable_clients(mech, **args)
  monkeypatch.setattr(vector, 'MAX_OPERATIONS', cost(1) / 2)
  assert vector.affordable_clients(mech, 6, 2, len(grid)) == 0
  with pytest.raises(vector.CostError):
    vector.divergence_curve(mech, orders, 6, t_grid=grid)


def test_power_sums_near_one_err_above_the_exact_value():
  """Where the laws nearly coincide (PBM, θ = 1e-7: D_α ~ 1e-13) float64's
  log-sum carries rounding of the order of its floor. Against exact rational
  arithmetic the value sits above the truth (conservative) by < 1e-13."""
  from fractions import Fraction
  from math import comb
  theta, levels, n = Fraction(1, 10**7), 16, 20
  mech = mechanisms.get('pbm')(clip=1.0, num_levels=levels, theta=1e-7)

  def law(s):   # PBM's level is Binomial(levels - 1, 1/2 + θ·x)
    p = Fraction(1, 2) + theta * s
    return [comb(levels - 1, k) * p**k * (1 - p)**(levels - 1 - k)
            for k in range(levels)]

  def conv(a, b):
    out = [Fraction(0)] * (len(a) + len(b) - 1)
    for i, u in enumerate(a):
      for j, v in enumerate(b):
        out[i + j] += u * v
    return out

  others = [Fraction(1)]
  for _ in range(n - 1):
    others = conv(others, law(0))
  exact_p, exact_q = conv(law(1), others), conv(law(-1), others)
  rest = [(mech.log_pmf(0.0), n - 1)]
  p = divergence.sum_log_pmf([(mech.log_pmf(1.0), 1)] + rest)
  q = divergence.sum_log_pmf([(mech.log_pmf(-1.0), 1)] + rest)
  for alpha in (2, 4):
    excess = sum(a**alpha / b**(alpha - 1) for a, b in zip(exact_p, exact_q)) - 1
    exact = math.log1p(float(excess)) / (alpha - 1)
    ours = matrix_sums.log_power_sums(p[None], q[None], np.array([float(alpha)]),
                                      0.0)[0, 0] / (alpha - 1)
    assert exact <= ours <= exact + 1e-12, (alpha, exact, ours)


def test_critical_inputs_are_mirrored_without_rounding_twins():
  """QMGeo's 256 levels mirrored: 256 critical inputs (not 512 whose halves
  differ by ~1e-16), symmetric, equally spaced."""
  mech = mechanisms.QMGeo(0.0121, 256, 2e-4, full_support=True)
  crit = vector.mirrored_critical_inputs(mech)
  assert crit.size == 256 and np.array_equal(crit, -crit[::-1])
  assert vector._on_lattice(crit)
  assert not vector._on_lattice(vector.mirrored_critical_inputs(mechanisms.RQM(1.0, 1.0, 16, 0.42)))


def test_lattice_grid_keeps_every_target_on_a_critical_input():
  """On a lattice of critical inputs `l2_grid` is every breakpoint: the
  targets are the critical inputs only (no mixed rows), nothing is off the
  lattice, every interval takes the chord, and the bound at u* is below the
  focused grid's (chords, not steps); it still bounds random pairs within
  each t, the others anywhere."""
  mech, n = mechanisms.QMGeo(1.0, 32, 0.2, full_support=True), 3
  t_star = 0.9
  grid = vector.l2_grid(mech, t_star, 24, n)
  assert grid.size == 31 and vector.off_lattice(mech, grid) == 0
  assert vector.off_lattice(mech, 24) == 0
  assert vector.off_lattice(mech, vector.focused_grid(1.0, t_star, 24)) > 0
  targets = vector.target_pairs(mech, grid)
  assert targets.upper_weights.shape[0] == 32 and len(targets.pairs) == 32**2
  curve = vector.divergence_curve(mech, ORDERS, n, t_grid=grid)
  assert np.all(curve.convex_on)
  focused = vector.divergence_curve(mech, ORDERS, n,
                                    t_grid=vector.focused_grid(1.0, t_star, 24))
  for alpha in (2.0, 8.0):
    assert curve.majorant(alpha, t_star**2) < focused.majorant(alpha, t_star**2)
  rng = np.random.default_rng(3)
  for s, t in enumerate(curve.t[::5]):
    for _ in range(4):
      x = rng.uniform(-1, 1)
      x_prime = float(np.clip(x + rng.uniform(-t, t), -1, 1))
      others = list(rng.uniform(-1, 1, n - 1))
      for alpha in (2.0, 8.0):
        true = _exact(mech, x, x_prime, others, alpha)
        bound = curve.values[alpha][5 * s]
        assert true <= bound * (1 + 1e-9) + 1e-12, (t, x, x_prime)


@pytest.mark.parametrize('name,params', [
    ('rqm', dict(num_levels=16)), ('qmgeo', dict(num_levels=8, p=0.3,
                                                  full_support=True)),
    ('quantized_gaussian', dict(num_levels=8))])
def test_mirror_images_are_evaluated_once(name, params):
  """A mirrored mechanism's pairs come in mirror-image couples with equal sums
  (the others' common part is symmetric): half are evaluated, and the curve
  equals the one that evaluates every pair up to float64's floor."""
  mech = _mech(name, **params)
  targets = vector.target_pairs(mech, vector.distance_grid(1.0, 12))
  log_r = vector.common_part(mech)[1]
  kept, expand = vector._mirror_classes(targets, log_r)
  assert targets.symmetric and len(kept) < 0.55 * len(targets.pairs)
  rows = targets.upper_weights.shape[0]
  where = {tuple(p): i for i, p in enumerate(targets.pairs)}
  for i, p in enumerate(targets.pairs):   # a pair and its image: one class
    assert expand[i] == expand[where[tuple(rows - 1 - p)]]
  np.testing.assert_array_equal(targets.distance[kept][expand], targets.distance)
  # An asymmetric others' law (or target set) keeps every pair.
  skew = log_r + np.linspace(0.0, 1e-6, log_r.size)
  assert len(vector._mirror_classes(targets, skew)[0]) == len(targets.pairs)
  halved = vector.divergence_curve(mech, ORDERS, 4, t_points=12)
  with pytest.MonkeyPatch.context() as mp:
    mp.setattr(vector, '_mirror_classes',
               lambda t, r: (np.arange(len(t.pairs)),) * 2)
    every = vector.divergence_curve(mech, ORDERS, 4, t_points=12)
  for a in ORDERS:
    np.testing.assert_allclose(halved.values[a], every.values[a], rtol=1e-9,
                               atol=1e-13)


def test_breakpoints_of_many_lattice_inputs_take_linear_memory(monkeypatch):
  """Over _PAIRWISE_INPUTS critical inputs (a lattice and its two ends: RQM at
  16 bits has 52,430) the distances come from the lattice in O(K), and equal
  the pairwise ones; off a lattice it is a ValueError, not 20 GB."""
  mech = _mech('rqm', num_levels=64, delta_ratio=0.25)
  crit = vector.mirrored_critical_inputs(mech)
  pairwise = vector._breakpoints(crit, 1.0)
  monkeypatch.setattr(vector, '_PAIRWISE_INPUTS', 8)
  np.testing.assert_allclose(vector._breakpoints(crit, 1.0), pairwise,
                             rtol=1e-9)
  with pytest.raises(ValueError, match='off a lattice'):
    vector._breakpoints(np.sort(np.random.default_rng(0).uniform(-1, 1, 20)),
                        1.0)


def test_log_ratio_max_in_blocks_equals_at_once(monkeypatch):
  rng = np.random.default_rng(1)
  p, q = np.log(rng.uniform(size=(5, 7))), np.log(rng.uniform(size=(4, 7)))
  p[0, 3] = -np.inf
  q[1, 2] = -np.inf
  pairs = np.array([[i, j] for i in range(5) for j in range(4)])
  whole = vector._log_ratio_max(p, q, pairs)
  monkeypatch.setattr(matrix_sums, '_BLOCK', 14)   # two pairs per block
  np.testing.assert_array_equal(vector._log_ratio_max(p, q, pairs), whole)
  assert np.isinf(whole[1 * 4 + 1]) and whole[1 * 4 + 1] > 0   # Q = 0 < P


def test_target_laws_over_the_memory_limit_are_refused_before_allocating(
    monkeypatch):
  """With vector.MAX_BYTES below the target pairs' laws: the local bound
  where the mechanism has one (named in the method), else CostError naming
  the GiB needed."""
  grid = vector.distance_grid(1.0, 8)
  qg = _mech('quantized_gaussian', num_levels=8, noise_multiplier=0.5,
             lattice=0)   # the paper's: it has the local bound
  monkeypatch.setattr(vector, 'MAX_BYTES', 100)
  curve = vector.divergence_curve(qg, [2.0], 3, t_grid=grid)
  assert 'GiB' in curve.method and curve.method.startswith('local')
  np.testing.assert_array_equal(curve.values[2.0],
                                qg.local_divergences([2.0], grid)[2.0])
  with pytest.raises(vector.CostError, match='GiB'):
    vector.divergence_curve(_mech('rqm'), [2.0], 3, t_grid=grid)


def test_mixed_rows_are_within_their_error_bound():
  """`_mix_rows`' scaled product, and its log-domain fallback where a mixed
  value is far below the column's largest (here e^-900): within
  `_mix_error` of 50-digit arithmetic."""
  import mpmath
  mpmath.mp.dps = 50
  rng = np.random.default_rng(0)
  basis = rng.uniform(-30, 0, (3, 50))
  basis[0, :10] = 0.0
  basis[1:, :10] -= 900.0     # rows 1-2 far below row 0 there
  basis[2, 40:] = -np.inf
  weights = np.array([[0.3, 0.7, 0.0], [0.0, 0.25, 0.75], [1.0, 0.0, 0.0],
                      [0.0, 0.0, 1.0]])
  targets = vector.TargetPairs(basis=basis, upper_weights=weights,
                               lower_weights=weights, pairs=np.zeros((1, 2), int),
                               distance=np.ones(1), method='vertices',
                               symmetric=False)
  got = vector._mix_rows(weights, basis)
  bound = vector._mix_error(targets, basis)
  for i, w in enumerate(weights):
    for z in range(basis.shape[1]):
      exact = mpmath.fsum(mpmath.mpf(float(wk)) * mpmath.exp(mpmath.mpf(b))
                          for wk, b in zip(w, basis[:, z])
                          if wk > 0 and np.isfinite(b))
      if exact == 0:
        assert got[i, z] == -np.inf
      else:
        assert abs(mpmath.mpf(got[i, z]) - mpmath.log(exact)) <= bound, (i, z)


def test_rows_convolved_after_the_others_sum_match_one_sum_per_row(
    monkeypatch):
  """`_with_sum` at >= _FFT_LEVELS levels: the others' law once and the rows
  by matrix products equals one tilted sum per row (RQM 128 levels, rows
  the ±c laws, 5 + 3 others at the ends), to 1e-9 in log."""
  mech = mechanisms.RQM(1.0, 4.0, 128, 0.3)
  plus, minus = divergence.end_log_pmfs(mech)
  rows, parts = np.stack([plus, minus]), [(plus, 5), (minus, 3)]
  once, lost = vector._with_sum(rows, parts)
  assert lost == -np.inf
  monkeypatch.setattr(vector, '_PRODUCT_CONVOLVE', 0)
  per_row = vector._with_sum(rows, parts)[0]
  finite = np.isfinite(per_row)
  assert np.array_equal(finite, np.isfinite(once))
  np.testing.assert_allclose(once[finite], per_row[finite], rtol=0, atol=1e-9)


def test_an_others_sum_cut_at_a_tail_reports_the_mass_it_drops():
  """`_with_sum` with a tail (RQM 128 levels, 40 + 30 others at the ends):
  the rows convolved with the cut law miss at most the row's mass times
  e^lost of the uncut convolution, and the cut law is shorter."""
  mech = mechanisms.RQM(1.0, 4.0, 128, 0.3)
  plus, minus = divergence.end_log_pmfs(mech)
  rows, parts = np.stack([plus, minus]), [(plus, 40), (minus, 30)]
  whole, none = vector._with_sum(rows, parts)
  cut, lost = vector._with_sum(rows, parts, tail=20.0)
  assert none == -np.inf and np.isfinite(lost) and cut.shape[1] < whole.shape[1]
  mass = lambda a: np.exp(np.logaddexp.reduce(a, axis=1))
  missing = mass(whole) - mass(cut)
  assert np.all(missing >= -1e-13)
  assert np.all(missing <= mass(rows) * math.exp(lost) + 1e-13)


def test_cut_powers_keep_the_pairs_power_sums_above_the_exact_value(
    monkeypatch):
  """The mixture bound's E_m with R^{*m} cut (a tail of 2 nats below its
  top, so the cut drops mass) plus the dropped mass times E_0 (`_add_lost`):
  at or above 40-digit arithmetic on the uncut law at every pair and order
  (RQM 8 levels, the common part, m = 7)."""
  import mpmath
  mpmath.mp.dps = 40
  mech = mechanisms.RQM(1.0, 1.0, 8, 0.42)
  targets = vector.target_pairs(mech, vector.distance_grid(1.0, 4))
  log_r = vector.common_part(mech)[1]
  orders = np.array([2.0, 8.0])
  drops = []
  real_powers = matrix_sums.Powers

  def recording(*args):
    drops.append(real_powers(*args))
    return drops[-1]
  monkeypatch.setattr(matrix_sums, 'Powers', recording)
  got = vector._evaluator(targets, log_r, orders, tail=2.0)(7)
  assert np.isfinite(drops[0].log_dropped(7))
  exp = lambda v: mpmath.exp(mpmath.mpf(float(v))) if np.isfinite(v) else 0
  r = [exp(v) for v in log_r]
  law = [mpmath.mpf(1)]
  for _ in range(7):
    law = [mpmath.fsum(r[k] * law[z - k] for k in range(len(r))
                       if 0 <= z - k < len(law))
           for z in range(len(law) + len(r) - 1)]
  basis = [[exp(v) for v in row] for row in targets.basis]

  def mixed(weights, i):
    row = [mpmath.fsum(mpmath.mpf(float(w)) * b[k] for w, b in
                       zip(weights[i], basis) if w > 0)
           for k in range(len(basis[0]))]
    return [mpmath.fsum(row[k] * law[z - k] for k in range(len(row))
                        if 0 <= z - k < len(law))
            for z in range(len(law) + len(row) - 1)]
  for p, (i, j) in enumerate(targets.pairs):
    up, lo = mixed(targets.upper_weights, i), mixed(targets.lower_weights, j)
    for o, alpha in enumerate(orders):
      exact = mpmath.log(mpmath.fsum(a**alpha * b**(1 - alpha)
                                     for a, b in zip(up, lo) if a > 0))
      assert got[o, p] >= exact, (p, alpha, got[o, p], exact)


def test_mixture_alone_skips_the_end_mixes_and_only_loosens():
  """RQM whose input range spans one level gap (the ends are its only
  vertices): inside `mixture_alone` the ±c mixes are skipped (the mechanism
  is listed) and every curve value is at or above the whole bound's; at n =
  30 the mixes are the tighter, so the values rise."""
  mech = mechanisms.get('rqm').for_coordinate_bound(
      1.0, num_levels=16, delta_ratio=16.0, q=0.3)
  assert others_lib.two_vertices(vector.mirrored_critical_inputs(mech), 1.0)
  grid = vector.distance_grid(1.0, 8)
  full = vector.divergence_curve(mech, [2.0, 8.0], 30, t_grid=grid)
  with vector.mixture_alone() as skipped:
    alone = vector.divergence_curve(mech, [2.0, 8.0], 30, t_grid=grid)
  assert skipped == [mech]
  for a in (2.0, 8.0):
    assert np.all(alone.values[a] >= full.values[a])
    assert np.all(alone.values[a] > 1.1 * full.values[a])
  # Outside the context nothing is skipped.
  again = vector.divergence_curve(mech, [2.0, 8.0], 30, t_grid=grid)
  np.testing.assert_array_equal(again.values[2.0], full.values[2.0])


def test_chord_of_the_smaller_bound_holds_where_two_bounds_cross():
  """`_assembled` takes the smaller of the vertex bound and the local bound at
  each grid point, then the chord of that. Here the two cross inside every
  other interval (the local bound is the larger at its left end, the smaller
  at its right), so at interior points the chord of the smaller lies below
  the smaller of the two chords; it still lies above the exact f_α, because
  the chord rests on exp((α-1)f_α) being convex there, not on either bound.

  RQM (8 levels), n = 2: vertex bound for any others (`others_mixture`); local
  bound: twice the vertex bound, plus 1, at even grid points and the exact f_α
  of the others at ±c at odd ones. The truth is that exact f_α (others at ±c,
  every mix on its own) at 9 interior points of every interval."""
  mech = _mech('rqm', num_levels=8)
  n, orders = 2, (2.0, 8.0)
  grid = vector.with_breakpoints(mech, vector.distance_grid(1.0, 8), 64, n)
  targets = vector.target_pairs(mech, grid)
  per_pair = vector._pair_divergences(mech, targets, orders, n,
                                      vector.EXACT_SPLITS, 'any')
  exact = lambda t_grid: vector.divergence_curve(
      mech, orders, n, t_grid=t_grid, exact_splits=n, others='extremes').values
  vertex = vector._assembled(targets, per_pair, grid, None, n)
  assert vertex.convex_on.all()
  at_grid = exact(grid)
  even = np.arange(grid.size) % 2 == 0
  local = {a: np.where(even, 2 * vertex.values[a] + 1, at_grid[a]) for a in orders}
  curve = vector._assembled(targets, per_pair, grid, local, n)
  alone = vector.DivergenceCurve(grid, local, 'local', n, vertex.convex_on)
  left = np.concatenate([[0.0], grid[:-1]])
  inner = (left[:, None] + np.linspace(0, 1, 11)[None, 1:-1] *
           (grid - left)[:, None]).ravel()
  fine = np.union1d(grid, inner)
  truth = exact(fine)
  crossings = 0
  for a in orders:
    v, l = vertex.values[a], local[a]
    assert np.all(l[~even] < v[~even]) and np.all(l[even] > v[even])
    for t, f in zip(fine, truth[a]):
      bound = _bound_at(curve, a, t)
      assert f <= bound * (1 + 1e-9) + 1e-12, (a, t)
      assert f <= curve.majorant(a, t**2) * (1 + 1e-9) + 1e-12, (a, t)
      separately = min(_bound_at(vertex, a, t), _bound_at(alone, a, t))
      assert bound <= separately * (1 + 1e-12)
      crossings += bound < separately * (1 - 1e-3)
  assert crossings > 20


@pytest.mark.parametrize('name, params', [
    ('ddgauss', dict(num_levels=1024, steps=40, noise_fraction=0.1)),
    ('skellam', dict(num_levels=1024, steps=50, noise_fraction=0.1)),
    ('gaussian', dict(noise_multiplier=0.7)),
])
def test_exact_curves_take_chords_only_between_breakpoints(name, params):
  """Exact curves (`sum_divergences`) whose exp((α-1)f) is convex between
  multiples of `divergence_breakpoint_step` take the chord there: the bound
  points lie above the exact f at every distance between grid points (a
  fine sweep, breakpoints inside and out), and at u* = t*² the majorant is
  within 1% of the concave hull of that sweep (a lower bound on the true
  majorant) where the breakpoints are fine, and never above the steps'."""
  mech = _mech(name, c=1.0, **params)
  n, c = 3, 1.0
  t_star = 0.61
  grid = vector.l2_grid(mech, t_star, 24, n)
  curve = vector.divergence_curve(mech, ORDERS, n, t_grid=grid)
  assert curve.convex_on is not None and curve.convex_on.any()
  step = mech.divergence_breakpoint_step
  if step:   # every chord interval is free of multiples of the step
    lo = np.concatenate([[0.0], grid[:-1]])
    for s in np.flatnonzero(curve.convex_on):
      inside = np.arange(math.floor(lo[s] / step) + 1, grid[s] / step) * step
      assert not np.any((inside > lo[s] * (1 + 1e-9)) &
                        (inside < grid[s] * (1 - 1e-9)))
  sweep = np.linspace(1e-3, 2 * c, 997)
  exact = mech.sum_divergences(ORDERS, n, sweep)
  for a in ORDERS:
    if math.isinf(a) and name == 'gaussian':
      continue
    us, ys = curve.bound_points(a)
    # The bound at u is the bound point at or before u (step function).
    at = np.searchsorted(us, sweep**2, side='right') - 1
    bound = ys[np.clip(at, 0, len(ys) - 1)]
    # Bound points are left ends of pieces: compare where a piece starts at
    # or before the swept distance.
    assert np.all(exact[a] <= np.maximum(bound, ys[np.minimum(at + 1, len(ys) - 1)])
                  * (1 + 1e-9) + 1e-12)
    value = mech.sum_divergences([a], n, [t_star])[a][0]
    steps = dataclasses.replace(curve, convex_on=None)
    if math.isfinite(value) and value > 0:
      assert curve.majorant(a, t_star**2) >= value * (1 - 1e-9)
      assert curve.majorant(a, t_star**2) <= steps.majorant(a, t_star**2)
      hull = vector._upper_hull(sweep**2, exact[a])
      true_at_least = np.interp(t_star**2, sweep[hull]**2, exact[a][hull])
      assert curve.majorant(a, t_star**2) >= true_at_least * (1 - 1e-9)
      if step:   # breakpoints around t* on the grid: near exact there
        assert curve.majorant(a, t_star**2) <= true_at_least * 1.01
