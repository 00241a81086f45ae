"""Tests for the divergence curve and its dispatcher (secure_sum/curve.py)."""

import dataclasses
import math

import numpy as np
import pytest

from tff_quant import mechanisms
from tff_quant.accounting import blankets
from tff_quant.accounting import composition
from tff_quant.accounting import divergence
from tff_quant.accounting import matrix_sums
from tff_quant.accounting import secure_sum
from tff_quant.accounting.secure_sum import curve as curve_lib
from tests.accounting.secure_sum import helpers


def _exact_mixes(mech, alpha, n):
  """max over the ±c mixes of D_α(S_{k+1} || S_k) from the computed sums,
  without the FFT's rounding allowance (what the mixes attain)."""
  at_plus, at_minus = divergence.end_log_pmfs(mech)
  d_inf = divergence.renyi_divergence(at_plus, at_minus, np.inf)
  sums = [divergence.sum_log_pmf_at_extremes(mech, j, n - j) for j in range(n + 1)]
  return max(divergence.renyi_divergence(sums[k + 1][0], sums[k][0], alpha,
                                         sums[k + 1][1], d_inf)
             for k in range(n))


@pytest.mark.parametrize('theta, n', [(0.01, 40), (0.001, 100)])
def test_pbm_trial_reduction_is_near_the_exact_mixes_and_beats_envelopes(
    theta, n, monkeypatch):
  """PBM (16 levels) as 15 independent one-trial PBMs: above every exact ±c mix
  (it holds for any others), within 3% of them at calibrated θ, and far below
  the cell envelopes it replaces (their spread per cell dominates there)."""
  mech = helpers.mech('pbm', num_levels=16, theta=theta)
  assert mech.sum_reduction(n).copies == 15
  grid = secure_sum.distance_grid(1.0, 8)
  split = secure_sum.divergence_curve(mech, [2.0, 8.0], n, t_grid=grid)
  for a in (2.0, 8.0):
    mixes = _exact_mixes(mech, a, n)
    assert mixes * (1 - 1e-9) <= split.values[a][-1] <= 1.03 * mixes
    # renyi_divergence_of_sum carries the FFT's proved rounding on top.
    assert divergence.renyi_divergence_of_sum(mech, a, n).value >= mixes
  monkeypatch.setattr(type(mech), '_sum_reduction', lambda self, n: None)
  envelopes = secure_sum.divergence_curve(mech, [2.0], n, t_grid=grid)
  assert np.all(envelopes.values[2.0] >= 4 * split.values[2.0])


def test_interior_targets_can_beat_the_ends():
  """Why targets range over every critical input: RQM at n = 1, α = 8."""
  mech = helpers.mech('rqm')
  curve = secure_sum.divergence_curve(mech, [8.0], 1, t_points=8)
  at_ends = divergence.renyi_divergence_of_sum(mech, 8.0, 1).value
  assert curve.values[8.0][-1] == pytest.approx(5.344228585, abs=1e-8)
  assert at_ends == pytest.approx(5.315642348, abs=1e-8)


@pytest.mark.parametrize('name', ['rqm', 'qmgeo', 'pbm', 'quantized_gaussian'])
@pytest.mark.parametrize('n', [1, 3])
def test_full_flip_covers_the_coordinate_route(name, n):
  mech = helpers.mech(name)
  curve = secure_sum.divergence_curve(mech, helpers.ORDERS, n, t_points=8)
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
  mech, n = helpers.mech(name, **params), 3
  curve = secure_sum.divergence_curve(mech, helpers.ORDERS, n, t_points=8, cells=32)
  rng = np.random.default_rng(0)
  for s, t in enumerate(curve.t):
    for _ in range(6):
      x = rng.uniform(-1, 1)
      x_prime = float(np.clip(x + rng.uniform(-t, t), -1, 1))
      mixes = [[1.0] * plus + [-1.0] * (n - 1 - plus) for plus in range(n)]
      for others in mixes + [list(rng.uniform(-1, 1, n - 1)) for _ in range(2)]:
        for alpha in helpers.ORDERS:
          true = helpers.exact(mech, x, x_prime, others, alpha)
          assert true <= curve.values[alpha][s] * (1 + 1e-9) + 1e-12, (t, x, x_prime)


def test_majorant_is_concave_monotone_and_above_the_bound():
  curve = secure_sum.divergence_curve(helpers.mech('rqm'), helpers.ORDERS, 2, t_points=16)
  fine = secure_sum.divergence_curve(helpers.mech('rqm'), helpers.ORDERS, 2, t_grid=np.linspace(
      0.005, 2, 400))
  for alpha in helpers.ORDERS:
    u = np.linspace(0, 4, 401)
    g = np.array([curve.majorant(alpha, v) for v in u])
    assert np.all(np.diff(g) >= -1e-12)
    assert np.all(np.diff(g, 2) <= 1e-9)
    assert np.all(g >= [helpers.bound_at(curve, alpha, math.sqrt(v)) - 1e-12 for v in u])
    # Above the exact f at 400 distances (vertex targets are exact at each).
    for t, f in zip(fine.t, fine.values[alpha]):
      assert curve.majorant(alpha, t**2) >= f * (1 - 1e-9) - 1e-12


@pytest.mark.parametrize('name', ['rqm', 'qmgeo', 'bq'])
def test_chord_bound_holds_between_grid_points(name):
  """Between grid points the chord (not the step) bounds f_α: checked against
  exact D_α at random pairs and distances, others in every ±c mix."""
  mech = helpers.mech(name, s=3, m=8) if name == 'bq' else helpers.mech(name, num_levels=8)
  n = 2
  grid = secure_sum.with_breakpoints(mech, secure_sum.distance_grid(1.0, 8), 64, n)
  curve = secure_sum.divergence_curve(mech, helpers.ORDERS, n, t_grid=grid)
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
        for alpha in helpers.ORDERS:
          true = helpers.exact(mech, a, b, others, alpha)
          assert true <= helpers.bound_at(curve, alpha, t) * (1 + 1e-9) + 1e-12, (t, a, b)
          checked += 1
  assert checked > 500


def test_bq_reduces_to_one_client_with_every_clients_noise():
  """BQ's curve is one client's with Binomial(n·m, 1/2) noise: infinite at
  every t > 0 (a pair straddling a grid point has different supports), as
  the exact sum with the others at ±c is."""
  mech = helpers.mech('bq', s=2, m=20)
  curve = secure_sum.divergence_curve(mech, [2.0], 40, t_grid=secure_sum.distance_grid(
      1.0, 8))
  assert 'Binomial(20, 1/2) noise' in curve.method and curve.num_clients == 40
  assert np.all(np.isinf(curve.values[2.0]))
  # Priced as one client's law (no convolution), not n clients' sum.
  one = secure_sum.estimated_operations(mech, 1, 1, 8)
  assert secure_sum.estimated_operations(mech, 40, 1, 8) < 2 * 40 * one
  assert math.isinf(divergence.renyi_divergence_of_sum(mech, 2.0, 40).value)


def test_power_sums_in_pair_blocks_equal_one_block(monkeypatch):
  """Memory is bounded by computing the pairs in blocks; the curve is unchanged."""
  mech = mechanisms.RQM(1.0, 1.0, 8, 0.42)
  whole = secure_sum.divergence_curve(mech, [2.0, 8.0], 5, t_points=8)
  monkeypatch.setattr(matrix_sums, '_BLOCK', 50)   # a few pairs per block
  blocked = secure_sum.divergence_curve(mech, [2.0, 8.0], 5, t_points=8)
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


def test_bad_others_is_refused():
  with pytest.raises(ValueError, match='others'):
    secure_sum.divergence_curve(helpers.mech('rqm'), [2.0], 3, t_points=8, others='ends')
  with pytest.raises(ValueError, match='others'):
    composition.training_guarantee(helpers.mech('rqm'), 5, 3, 10, 1e-5, others='ends')


def test_mixture_alone_skips_the_end_mixes_and_only_loosens():
  """RQM whose input range spans one level gap (the ends are its only
  vertices): with `PairBounds(end_mixes=False)` the ±c mixes are skipped
  (the mechanism is listed) and every curve value is at or above the whole
  bound's; at n = 30 the mixes are the tighter, so the values rise: by 12%
  at t = 2c/8, α = 2 before the laws' error (1.1208), 9.3% with RQM's η =
  1.1e-12 carried (`numerics`: the mixes carry n·(2α-1)η/(α-1) = 1.0e-10,
  the mixture bound one law's, 3.4e-12, on values ~4e-9)."""
  mech = mechanisms.get('rqm').for_coordinate_bound(
      1.0, num_levels=16, delta_ratio=16.0, q=0.3)
  assert blankets.two_vertices(secure_sum.mirrored_critical_inputs(mech), 1.0)
  grid = secure_sum.distance_grid(1.0, 8)
  full = secure_sum.divergence_curve(mech, [2.0, 8.0], 30, t_grid=grid)
  bounds = secure_sum.PairBounds(end_mixes=False)
  alone = secure_sum.divergence_curve(mech, [2.0, 8.0], 30, t_grid=grid,
                                      pair_bounds=bounds)
  assert bounds.skipped == [mech]
  for a in (2.0, 8.0):
    assert np.all(alone.values[a] >= full.values[a])
    assert np.all(alone.values[a] > 1.05 * full.values[a])
  # By default nothing is skipped.
  again = secure_sum.divergence_curve(mech, [2.0, 8.0], 30, t_grid=grid)
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
  mech = helpers.mech('rqm', num_levels=8)
  n, orders = 2, (2.0, 8.0)
  grid = secure_sum.with_breakpoints(mech, secure_sum.distance_grid(1.0, 8), 64, n)
  targets = secure_sum.target_pairs(mech, grid)
  per_pair = curve_lib._pair_divergences(
      mech, targets, orders, n, secure_sum.EXACT_SPLITS, 'any',
      secure_sum.DEFAULT_LIMITS, secure_sum.PairBounds())
  exact = lambda t_grid: secure_sum.divergence_curve(
      mech, orders, n, t_grid=t_grid, exact_splits=n, others='extremes').values
  vertex = curve_lib._assembled(targets, per_pair, grid, None, n)
  assert vertex.convex_on.all()
  at_grid = exact(grid)
  even = np.arange(grid.size) % 2 == 0
  local = {a: np.where(even, 2 * vertex.values[a] + 1, at_grid[a]) for a in orders}
  curve = curve_lib._assembled(targets, per_pair, grid, local, n)
  alone = secure_sum.DivergenceCurve(grid, local, 'local', n, vertex.convex_on)
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
      bound = helpers.bound_at(curve, a, t)
      assert f <= bound * (1 + 1e-9) + 1e-12, (a, t)
      assert f <= curve.majorant(a, t**2) * (1 + 1e-9) + 1e-12, (a, t)
      separately = min(helpers.bound_at(vertex, a, t), helpers.bound_at(alone, a, t))
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
  mech = helpers.mech(name, c=1.0, **params)
  n, c = 3, 1.0
  t_star = 0.61
  grid = secure_sum.l2_grid(mech, t_star, 24, n)
  curve = secure_sum.divergence_curve(mech, helpers.ORDERS, n, t_grid=grid)
  assert curve.convex_on is not None and curve.convex_on.any()
  step = mech.divergence_breakpoint_step
  if step:   # every chord interval is free of multiples of the step
    lo = np.concatenate([[0.0], grid[:-1]])
    for s in np.flatnonzero(curve.convex_on):
      inside = np.arange(math.floor(lo[s] / step) + 1, grid[s] / step) * step
      assert not np.any((inside > lo[s] * (1 + 1e-9)) &
                        (inside < grid[s] * (1 - 1e-9)))
  sweep = np.linspace(1e-3, 2 * c, 997)
  exact = mech.sum_divergences(helpers.ORDERS, n, sweep)
  for a in helpers.ORDERS:
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
      true_at_least = secure_sum.concave_majorant_at(sweep**2, exact[a],
                                                     t_star**2)
      assert curve.majorant(a, t_star**2) >= true_at_least * (1 - 1e-9)
      if step:   # breakpoints around t* on the grid: near exact there
        assert curve.majorant(a, t_star**2) <= true_at_least * 1.01


def test_concave_majorant_is_at_or_above_the_exact_one_under_abscissa_rounding():
  """Issue 61 (Numerics 5): the least concave majorant in exact rational
  arithmetic (every straddling pair) is never above `concave_majorant_at`,
  also when the abscissae it is given are off by up to 7u relative (as the
  chords' t_0 + λΔt, squared, are); and it is not loose (within 1e-13)."""
  from fractions import Fraction  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(5)
  for _ in range(40):
    x = np.concatenate([[0.0], np.sort(rng.uniform(0, 1, 12))])
    y = np.maximum.accumulate(np.sort(rng.uniform(0, 3, 13)) * rng.uniform(0.5, 1))
    xs = [Fraction(float(v)) for v in x]
    ys = [Fraction(float(v)) for v in y]
    for at in rng.uniform(0, 1, 5):
      v = min(Fraction(float(at)), xs[-1])   # clipped to the last point
      exact = max((ys[a] + (v - xs[a]) / (xs[b] - xs[a]) * (ys[b] - ys[a])
                   if xs[b] > xs[a] else max(ys[a], ys[b]))
                  for a in range(13) for b in range(13) if xs[a] <= v <= xs[b])
      shaken = x * (1 + rng.uniform(-7, 7, 13) * 2.0**-53)
      got = secure_sum.concave_majorant_at(shaken, y, float(at))
      assert Fraction(got) >= exact
      assert got <= float(exact) * (1 + 1e-13) + 1e-13
  assert secure_sum.concave_majorant_at(np.arange(3.0), np.array([0, 1, np.inf]),
                                        0.5) == math.inf


def test_concave_majorant_refuses_negative_abscissae():
  """Helper review: at x < 0 the read point v(1 + 8u) moves left, and the
  value fell below the exact majorant; the abscissae are squared distances."""
  with pytest.raises(ValueError, match='`x` must be >= 0'):
    secure_sum.concave_majorant_at(np.array([-1e6 - 1, -1e6]),
                                   np.array([0.0, 1.0]), -1e6 - 0.5)
