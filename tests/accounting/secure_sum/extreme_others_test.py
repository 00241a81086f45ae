"""Tests for the others at ±c (secure_sum/extreme_others.py)."""

import itertools
import math

import numpy as np
import pytest

from tff_quant import mechanisms
from tff_quant.accounting import divergence
from tff_quant.accounting import matrix_sums
from tff_quant.accounting import others as others_lib
from tff_quant.accounting import secure_sum
from tff_quant.accounting.secure_sum import convolution
from tests.accounting.secure_sum import helpers


@pytest.mark.parametrize('name', ['rqm', 'qmgeo', 'pbm'])
@pytest.mark.parametrize('n', [2, 3])
def test_others_at_extremes_are_the_worst_over_critical_inputs(name, n):
  """Item 2's search: every multiset of critical inputs for the others, every
  target pair of critical inputs; none beats the ±c mixes others='extremes'
  assumes."""
  mech = helpers.mech(name)
  crit = np.unique(mech.critical_inputs())
  crit = crit[np.unique(np.linspace(0, len(crit) - 1, 7).round().astype(int))]
  for alpha in (2.0, 8.0):
    accounted = secure_sum.divergence_curve(mech, [alpha], n, t_points=8,
                                            others='extremes').values[alpha][-1]
    worst = max(helpers.exact(mech, x, y, others, alpha)
                for x in crit for y in crit
                for others in itertools.combinations_with_replacement(crit, n - 1))
    assert worst <= accounted * (1 + 1e-9)


@pytest.mark.parametrize('mech', [mechanisms.RQM(1.0, 1.0, 8, 0.42),
                                  mechanisms.PBM(1.0, 8, 0.25)])
@pytest.mark.parametrize('others', secure_sum.OTHERS)
def test_grouped_splits_of_the_others_bound_every_split(mech, others,
                                                       monkeypatch):
  """Groups of mixes (extremes) or of the others' common-part count (any) are
  bounded by their first member; the default grouping loses little."""
  orders, grid = [2.0, 8.0], secure_sum.distance_grid(1.0, 8)
  curve = lambda k: secure_sum.divergence_curve(mech, orders, 40, t_grid=grid,
                                                exact_splits=k, others=others)
  coarse, default = curve(1), curve(secure_sum.EXACT_SPLITS)
  monkeypatch.setattr(others_lib, 'REFINE', 0.0)   # every count evaluated alone
  every = curve(40)
  for a in orders:
    assert np.all(coarse.values[a] >= every.values[a] * (1 - 1e-12))
    assert np.all(default.values[a] >= every.values[a] * (1 - 1e-12))
    # The default (singles next to the anchors) loses under 2% here.
    assert np.all(default.values[a] <= every.values[a] * 1.02)


def test_two_vertex_mixes_are_evaluated_one_by_one():
  """QMGeo at 4 bits of the FL table (16 levels on ±16c, p = 0.46: no level
  inside (-c, c), so the ±c mixes are the sup over any others), n = 100, t =
  2/√8192: the curve at t is the largest D_2 over the mixes of the 99
  others at ±c (brute force at k = 0, 1, 49, 98, 99 at +c: the largest is
  at k = 0), where grouped mixes (EXACT_SPLITS) were 7.5% above it."""
  dim, n = 8192, 100
  c, t = 3 / math.sqrt(dim), 2 / math.sqrt(dim)
  mech = mechanisms.QMGeo(c, 16, 0.4583395600612428, full_support=True,
                          level_range=16 * c)
  assert secure_sum.vertex_splits(n, secure_sum.EXACT_SPLITS) == n
  assert secure_sum.vertex_splits(secure_sum.EVERY_MIX + 2, 8) == 8
  curve = secure_sum.divergence_curve(mech, [2.0], n, t_grid=[t, 2 * c])
  worst = 0.0
  for k in (0, 1, 49, 98, 99):
    rest = [(mech.log_pmf(c), k), (mech.log_pmf(-c), n - 1 - k)]
    for x, y in ((c, c - t), (c - t, c)):
      p = divergence.sum_log_pmf([(mech.log_pmf(x), 1)] + rest)
      q = divergence.sum_log_pmf([(mech.log_pmf(y), 1)] + rest)
      worst = max(worst, divergence.renyi_divergence(p, q, 2.0))
  assert worst <= curve.values[2.0][0] <= worst * (1 + 1e-6)


def _longdouble_log_power_sums(targets, at_plus, at_minus, num_clients,
                               groups, orders):
  """[orders, pairs] max over `groups` of log Σ P^α Q^(1-α), every law built
  by direct convolution in 80-bit arithmetic (np.longdouble, u = 2^-64)
  from the float64 log-pmfs taken as exact."""
  ld = np.longdouble
  to = lambda lp: np.exp(np.asarray(lp, ld))
  plus, minus, basis = to(at_plus), to(at_minus), to(targets.basis)
  tiny = np.finfo(ld).tiny
  up = np.asarray(targets.upper_weights, ld) @ basis
  lo = np.asarray(targets.lower_weights, ld) @ basis

  def power(law, m):
    out = np.ones(1, ld)
    for _ in range(m):
      out = np.convolve(out, law)
    return out

  best = np.full((len(orders), len(targets.pairs)), -np.inf)
  for k0, k1 in groups:
    others = np.convolve(power(plus, k0), power(minus, num_clients - 1 - k1))
    for j, (a, b) in enumerate(targets.pairs):
      p, q = np.convolve(up[a], others), np.convolve(lo[b], others)
      keep = p > tiny
      assert np.all(q[keep] > tiny)   # no underflow: the logs are exact enough
      lp, lq = np.log(p[keep]), np.log(q[keep])
      for i, alpha in enumerate(orders):
        t = ld(alpha) * lp + ld(1 - alpha) * lq   # log domain: no overflow
        top = np.max(t)
        value = top + np.log(np.sum(np.exp(t - top)))
        best[i, j] = max(best[i, j], float(value))
  return best


def _check_proved_above_80_bit(mech, n, orders,
                               limits=secure_sum.DEFAULT_LIMITS):
  """`extreme_mixes` of `mech` at t = 2c (4 single groups next to each
  anchor) is at or above the 80-bit direct convolution's value at every
  order and pair, and above it by no more than the proved allowance
  carried: (2α-1)·(the others' law's largest per-entry bound after mixing)
  + the power sums' uniform rounding bound (`matrix_sums`). With `limits`
  under which `proved_mixes_apply` fails, the others' laws come from the
  tilted FFT and the bound after mixing is its `ColumnError`'s."""
  c = mech.input_bound
  targets = secure_sum.target_pairs(mech, np.array([2 * c]))
  got = secure_sum.extreme_mixes(mech, targets, n, orders, exact=4,
                                 limits=limits)
  first = (n - 1) // 2 if targets.symmetric else 0
  groups = others_lib.split_groups(first, n - 1, (n - 1) // 2, 4)
  at_plus, at_minus = divergence.end_log_pmfs(mech)
  exact = _longdouble_log_power_sums(targets, at_plus, at_minus, n, groups,
                                     orders)
  exact = np.maximum(exact, 0.0)   # extreme_mixes reports at least 0
  margin = got - exact
  assert np.all(margin >= -1e-15), margin.min()
  powers = (secure_sum.extreme_others._powers(at_plus, math.inf),
            secure_sum.extreme_others._powers(at_minus, math.inf))
  proved = secure_sum.extreme_others.proved_mixes_apply(mech, n, limits)
  err = 0.0
  for k0, k1 in groups:
    if proved:
      conv, law_err, _ = secure_sum.extreme_others._proved_sum(
          targets.basis, powers, (k0, n - 1 - k1))
    else:
      conv, law_err, _ = convolution.with_sum(
          targets.basis, [(at_plus, k0), (at_minus, n - 1 - k1)],
          limits=limits, with_error=True)
    err = max(err, float(np.max(convolution.mixed_error(
        targets.upper_weights, conv, law_err)[1])))
  conv_len = n * (mech.num_levels - 1) + 1
  allowance = 1.01 * ((2 * orders - 1) * err + matrix_sums.U * (
      5 * 708 + 2 * 700 + 4 + conv_len) + 3 * matrix_sums.LIB)
  assert np.all(margin <= allowance[:, None]), (margin, allowance)
  return margin


def test_qmgeo_served_4_bit_mixes_are_proved_above_80_bit_convolution():
  """Issue 61, item 3: at QMGeo's served 4-bit cell (16 levels, p = 0.9814,
  range 256·c, c = 2/√61706, n = 100) the ±c mixes set the bound; their
  laws now come from `matrix_sums` with its proved error carried, so every
  pair's log power sum is at or above the 80-bit direct convolution's (whose
  own error, ~1e-16 relative after 99 convolutions of 16 terms at u = 2^-64,
  is far below the margin asserted), and above it by no more than the
  carried allowance."""
  c = 2.0 / math.sqrt(61706)
  mech = mechanisms.get('qmgeo').for_coordinate_bound(
      c, num_levels=16, p=0.9814228019672326, full_support=True,
      range_ratio=256.0)
  n = 100
  assert secure_sum.extreme_others.proved_mixes_apply(mech, n)
  _check_proved_above_80_bit(mech, n, np.array([2.0, 8.0]))


def test_qmgeo_served_4_bit_mixes_by_the_fft_carry_its_proved_error():
  """Issue 61, item 3, on the FFT's side: the same cell with the ±c mixes'
  laws forced onto the tilted FFT (`Limits(proved_mixes=0)`, as for every
  cell above `Limits.proved_mixes`). Its proved per-entry error (~9e-10 at
  the laws' modes here) is carried, so every pair's log power sum is at or
  above the 80-bit direct convolution's, within the carried allowance; the
  FFT's actual error alone had put the value only 2e-10 to 8.5e-10 above
  the exact one (issue 61), and the margin is now at least 1e-9 at α = 2."""
  c = 2.0 / math.sqrt(61706)
  mech = mechanisms.get('qmgeo').for_coordinate_bound(
      c, num_levels=16, p=0.9814228019672326, full_support=True,
      range_ratio=256.0)
  n, limits = 100, secure_sum.Limits(proved_mixes=0)
  assert not secure_sum.extreme_others.proved_mixes_apply(mech, n, limits)
  margin = _check_proved_above_80_bit(mech, n, np.array([2.0, 8.0]), limits)
  assert np.all(margin[0] >= 1e-9), margin


@pytest.mark.parametrize('theta', [2.314669993915911e-05, 0.02731427771826951])
def test_one_trial_pbm_mixes_are_proved_above_80_bit_convolution(theta):
  """Issue 61, items 1 and 6: one PBM trial (the 16-bit frontier cell's
  sum reduction, θ = 2.3e-5, and the 1-bit cell's, θ = 0.027; clip
  1/√61706, n = 100): the ±c mixes' closed-form powers (`_TwoPointPowers`)
  keep every pair's log power sum at or above the 80-bit direct
  convolution's at orders 2 to 256, within the carried allowance. At θ =
  2.3e-5 the margin is at most (2α-1)·600u + 6,000u (the mixed rows carry
  ~400u at their mode, the power sums' rounding the rest); with the share
  p̃ and log(e^l0 + e^l1) carried (~1,950u per law, uniformly) the rows
  carried ~4,100u there."""
  mech = mechanisms.PBM(1 / math.sqrt(61706), 2, theta)
  n, orders = 100, np.array([2.0, 10.0, 256.0])
  assert secure_sum.extreme_others.proved_mixes_apply(mech, n)
  margin = _check_proved_above_80_bit(mech, n, orders)
  if theta < 1e-4:
    tight = (2 * orders - 1) * 600 * matrix_sums.U + 6000 * matrix_sums.U
    assert np.all(margin <= tight[:, None]), margin


def test_ln2_split_is_within_its_stated_error():
  """LN2_HI + LN2_LO against ln 2 at 60 digits; LN2_HI's low 21 bits are
  zero (so b + LN2_HI is exact near b = -ln 2)."""
  import mpmath   # pylint: disable=g-import-not-at-top
  eo = secure_sum.extreme_others
  with mpmath.workdps(60):
    gap = mpmath.mpf(eo.LN2_HI) + mpmath.mpf(eo.LN2_LO) - mpmath.log(2)
    assert abs(gap) <= eo.LN2_SPLIT_ERROR
  assert math.ldexp(eo.LN2_HI, 32) == round(math.ldexp(eo.LN2_HI, 32))


@pytest.mark.parametrize('log_r', [[math.log(0.3), math.log(0.7)],
                                   [math.log(0.9), math.log(0.1) - 1e-3],
                                   [math.log(0.5 + 2.3e-5),
                                    math.log(0.5 - 2.3e-5)],
                                   [math.log(0.5 - 2.3e-5),
                                    math.log(0.5 + 2.3e-5)],
                                   [0.0, -np.inf]])
def test_two_point_powers_within_their_proved_error(log_r):
  """A two-entry law's m-fold convolution in closed form (one PBM trial's
  ±c mixes) against 40-digit binomial sums of the same measure: every entry
  within its own bound (`EntryError.at`) and the uniform one; near p = 1/2
  (the 16-bit cells' trial) the bound in the bulk is under 60u at m = 99
  (the share p̃ and log(e^l0 + e^l1) carried ~1,950u there)."""
  import mpmath   # pylint: disable=g-import-not-at-top
  powers = secure_sum.extreme_others._TwoPointPowers(np.array(log_r))
  for m in (1, 2, 7, 50, 99):
    law, err = powers(m)
    bound = matrix_sums.EntryError.of(err, law).at(law)
    with mpmath.workdps(40):
      a0, a1 = (mpmath.exp(v) if np.isfinite(v) else mpmath.mpf(0)
                for v in log_r)
      for j in range(m + 1):
        exact = mpmath.binomial(m, j) * a0**(m - j) * a1**j
        if exact == 0:
          assert law[j] == -np.inf
        else:
          miss = abs(mpmath.log(exact) - mpmath.mpf(law[j]))
          assert miss <= bound[j] <= err * (1 + 1e-12), (m, j)
    assert err < 1e-11
    if abs(log_r[0] - log_r[1]) < 1e-3:
      assert bound[m // 2] < 60 * matrix_sums.U
