"""Tests for the bound over any inputs of the others (secure_sum/any_others.py)."""

import dataclasses
import math

import numpy as np
import pytest

from tff_quant import mechanisms
from tff_quant.accounting import divergence
from tff_quant.accounting import matrix_sums
from tff_quant.accounting import secure_sum
from tff_quant.accounting.secure_sum import any_others
from tff_quant.accounting.secure_sum import convolution
from tff_quant.accounting.secure_sum import curve as curve_lib
from tff_quant.accounting.secure_sum import extreme_others
from tests.accounting.secure_sum import helpers


@pytest.mark.parametrize('name', ['rqm', 'pbm', 'qmgeo', 'quantized_gaussian', 'bq',
                                  'randomized_projection'])
def test_common_part_lies_below_every_input_law(name):
  """The common part is a min over every input in [-c, c] (the critical inputs
  attain it): checked on 801 inputs."""
  mech = helpers.mech(name, s=3, m=8) if name == 'bq' else helpers.mech(name)
  log_beta, log_r = secure_sum.common_part(mech)
  assert 0 < math.exp(log_beta) <= 1
  assert np.exp(log_r).sum() == pytest.approx(1.0, abs=1e-12)
  for x in np.linspace(-1, 1, 801):
    assert np.all(log_beta + log_r <= mech.log_pmf(x) + 1e-12)


def test_any_others_is_close_to_the_extremes_where_the_laws_overlap():
  """Calibrated regime (RQM Δ = 32c, 40 clients): the proved bound is within 8%
  of every exact ±c mix (which it must exceed); at the papers' low noise it
  is valid but much looser."""
  grid = secure_sum.distance_grid(1.0, 8)
  noisy = helpers.mech('rqm', num_levels=16, delta_ratio=32, q=0.073)
  for mech, hi in ((noisy, 1.08), (helpers.mech('rqm'), 20.0)):
    any_ = secure_sum.divergence_curve(mech, [2.0, 8.0], 40, t_grid=grid)
    ext = secure_sum.divergence_curve(mech, [2.0, 8.0], 40, t_grid=grid,
                                      others='extremes')
    for a in (2.0, 8.0):
      mixes = divergence.renyi_divergence_of_sum(mech, a, 40).value
      assert mixes * (1 - 1e-9) <= any_.values[a][-1] <= hi * mixes
      assert ext.values[a][-1] >= mixes * (1 - 1e-9)


@pytest.mark.parametrize('name,params', [
    ('rqm', dict(num_levels=16)), ('qmgeo', dict(num_levels=8, p=0.3,
                                                  full_support=True)),
    ('quantized_gaussian', dict(num_levels=8))])
def test_mirror_images_are_evaluated_once(name, params):
  """A mirrored mechanism's pairs come in mirror-image couples with equal sums
  (the others' common part is symmetric): half are evaluated, and the curve
  equals the one that evaluates every pair up to float64's floor."""
  mech = helpers.mech(name, **params)
  targets = secure_sum.target_pairs(mech, secure_sum.distance_grid(1.0, 12))
  log_r = secure_sum.common_part(mech)[1]
  kept, expand = any_others.mirror_classes(targets, log_r)
  assert targets.symmetric and len(kept) < 0.55 * len(targets.pairs)
  rows = targets.upper_weights.shape[0]
  where = {tuple(p): i for i, p in enumerate(targets.pairs)}
  for i, p in enumerate(targets.pairs):   # a pair and its image: one class
    assert expand[i] == expand[where[tuple(rows - 1 - p)]]
  np.testing.assert_array_equal(targets.distance[kept][expand], targets.distance)
  # An asymmetric others' law (or target set) keeps every pair.
  skew = log_r + np.linspace(0.0, 1e-6, log_r.size)
  assert len(any_others.mirror_classes(targets, skew)[0]) == len(targets.pairs)
  halved = secure_sum.divergence_curve(mech, helpers.ORDERS, 4, t_points=12)
  # The same search with every pair evaluated: the target set declared
  # asymmetric (only `mirror_classes` reads it for others='any' here: the
  # ends are not the only vertices).
  assert not extreme_others.ends_are_vertices(mech, targets)
  grid = secure_sum.distance_grid(1.0, 12)
  asymmetric = dataclasses.replace(targets, symmetric=False)
  per_pair = curve_lib._pair_divergences(
      mech, asymmetric, sorted(helpers.ORDERS), 4, secure_sum.EXACT_SPLITS,
      'any', secure_sum.DEFAULT_LIMITS, secure_sum.PairBounds())
  every = curve_lib._assembled(asymmetric, per_pair, grid,
                               mech.local_divergences(sorted(helpers.ORDERS),
                                                      grid), 4)
  assert every.method == halved.method
  for a in helpers.ORDERS:
    np.testing.assert_allclose(halved.values[a], every.values[a], rtol=1e-9,
                               atol=1e-13)


def test_cut_powers_keep_the_pairs_power_sums_above_the_exact_value(
    monkeypatch):
  """The mixture bound's E_m with R^{*m} cut (a tail of 2 nats below its
  top, so the cut drops mass) plus the dropped mass times E_0 (`convolution.add_lost`):
  at or above 40-digit arithmetic on the uncut law at every pair and order
  (RQM 8 levels, the common part, m = 7)."""
  import mpmath
  mpmath.mp.dps = 40
  mech = mechanisms.RQM(1.0, 1.0, 8, 0.42)
  targets = secure_sum.target_pairs(mech, secure_sum.distance_grid(1.0, 4))
  log_r = secure_sum.common_part(mech)[1]
  orders = np.array([2.0, 8.0])
  drops = []
  real_powers = matrix_sums.Powers

  def recording(*args):
    drops.append(real_powers(*args))
    return drops[-1]
  monkeypatch.setattr(matrix_sums, 'Powers', recording)
  got = any_others._evaluator(targets, log_r, orders, 2.0,
                              secure_sum.DEFAULT_LIMITS)(7)
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


def test_blankets_weight_is_lowered_by_the_laws_proved_error():
  """A blanket certified on the computed laws holds for the exact ones with
  β·e^(-gη) (`numerics.blanket_log_beta`): the cached blankets carry it."""
  mech = mechanisms.PBM(1.0, 8, 0.25)
  targets = secure_sum.target_pairs(mech, np.array([2.0]))
  eta = mech.log_pmf_error
  assert eta > 0
  raw_beta, _ = any_others.common_part(mech)
  got = any_others.blankets(mech, targets, 10)
  assert got[0].log_beta == pytest.approx(raw_beta - eta, abs=1e-15)
  assert all(b.log_beta <= 0 for b in got)


def _longdouble_log_e(targets, log_r, m, orders):
  """[orders, pairs] log Σ P^α Q^(1-α) of each pair's rows convolved with
  R^{*m}, by direct convolution in 80-bit arithmetic (np.longdouble, u =
  2^-64) from the float64 log-pmfs taken as exact."""
  ld = np.longdouble
  basis = np.exp(np.asarray(targets.basis, ld))
  up = np.asarray(targets.upper_weights, ld) @ basis
  lo = np.asarray(targets.lower_weights, ld) @ basis
  r, law = np.exp(np.asarray(log_r, ld)), np.ones(1, ld)
  for _ in range(m):
    law = np.convolve(law, r)
  out = np.empty((len(orders), len(targets.pairs)))
  for j, (a, b) in enumerate(targets.pairs):
    p, q = np.convolve(up[a], law), np.convolve(lo[b], law)
    keep = p > 0
    assert np.all(q[keep] > np.finfo(ld).tiny)
    lp, lq = np.log(p[keep]), np.log(q[keep])
    for i, alpha in enumerate(orders):
      t = ld(alpha) * lp + ld(1 - alpha) * lq
      top = np.max(t)
      out[i, j] = float(top + np.log(np.sum(np.exp(t - top))))
  return out


@pytest.mark.parametrize('limits,tail', [
    (secure_sum.Limits(matrix_levels=8), math.inf),
    (secure_sum.Limits(matrix_levels=8, fft_levels=8), 30.0),
    (secure_sum.Limits(matrix_levels=8, product_convolve=0), math.inf)])
def test_fft_powers_carry_their_proved_error(limits, tail):
  """Above `Limits.matrix_levels` levels E_m comes from the tilted FFT sum
  R^{*m} with its proved per-entry error carried (`convolution.with_sum(...,
  with_error=True)`): by the others' law once (matrix products), cut at a
  tail (the mass dropped added back), and one sum per row
  (`product_convolve` = 0). RQM 16 levels, the common part, m = 40: at or
  above the 80-bit direct convolution at every pair and order, and above it
  by at most (2α-1)·(the largest carried bound after mixing) + the power
  sums' rounding + the cut's share (measured: 0.7e-10 to 1.3e-8 above,
  log E up to 7.3)."""
  mech = mechanisms.RQM(1.0, 1.0, 16, 0.42)
  targets = secure_sum.target_pairs(mech, secure_sum.distance_grid(1.0, 4))
  log_r = secure_sum.common_part(mech)[1]
  orders, m = np.array([2.0, 8.0]), 40
  got = any_others._evaluator(targets, log_r, orders, tail, limits)(m)
  exact = _longdouble_log_e(targets, log_r, m, orders)
  margin = got - exact
  assert np.all(margin >= 0), margin.min()
  conv, err, lost = convolution.with_sum(targets.basis, [(log_r, m)], tail,
                                         limits, with_error=True)
  assert isinstance(err, convolution.ColumnError)
  assert (lost > -np.inf) == math.isfinite(tail)
  worst = max(float(np.max(convolution.mixed_error(w, conv, err)[1]))
              for w in (targets.upper_weights, targets.lower_weights))
  # Useful where the mass lies: within e^5 of each mixed row's top the
  # carried bound is under 1e-8 (the largest, far in the tails, ~1e-6).
  mixed, bound = convolution.mixed_error(targets.upper_weights, conv, err)
  bulk = mixed >= np.max(mixed, axis=1, keepdims=True) - 5
  assert np.max(bound[bulk]) < 1e-8
  log_e0 = convolution.pair_log_sums(targets, targets.basis, orders, 0.0)
  cut_share = np.exp(lost + log_e0 - exact)
  allowance = 1.01 * ((2 * orders[:, None] - 1) * worst + matrix_sums.U * (
      5 * 708 + 2 * 700 + 4 + conv.shape[1]) + 3 * matrix_sums.LIB) + 1.01 * cut_share
  assert np.all(margin <= allowance), (margin, allowance)
