"""Tests for the log-domain rows against the others' law (secure_sum/convolution.py)."""

import math

import numpy as np
import pytest

from tff_quant import mechanisms
from tff_quant.accounting import divergence
from tff_quant.accounting import matrix_sums
from tff_quant.accounting import secure_sum
from tff_quant.accounting.secure_sum import convolution


def test_log_ratio_max_in_blocks_equals_at_once(monkeypatch):
  rng = np.random.default_rng(1)
  p, q = np.log(rng.uniform(size=(5, 7))), np.log(rng.uniform(size=(4, 7)))
  p[0, 3] = -np.inf
  q[1, 2] = -np.inf
  pairs = np.array([[i, j] for i in range(5) for j in range(4)])
  whole = convolution.log_ratio_max(p, q, pairs)
  monkeypatch.setattr(matrix_sums, '_BLOCK', 14)   # two pairs per block
  np.testing.assert_array_equal(convolution.log_ratio_max(p, q, pairs), whole)
  assert np.isinf(whole[1 * 4 + 1]) and whole[1 * 4 + 1] > 0   # Q = 0 < P


def test_mixed_rows_are_within_their_error_bound():
  """`mix_rows`' scaled product, and its log-domain fallback where a mixed
  value is far below the column's largest (here e^-900): within
  its own per-entry rounding bound of 50-digit arithmetic, a bound of at
  most 1e-13 where the mixed value is near its column's top."""
  import mpmath
  mpmath.mp.dps = 50
  rng = np.random.default_rng(0)
  basis = rng.uniform(-30, 0, (3, 50))
  basis[0, :10] = 0.0
  basis[1:, :10] -= 900.0     # rows 1-2 far below row 0 there
  basis[2, 40:] = -np.inf
  weights = np.array([[0.3, 0.7, 0.0], [0.0, 0.25, 0.75], [1.0, 0.0, 0.0],
                      [0.0, 0.0, 1.0]])
  got, bound = convolution.mix_rows(weights, basis, with_error=True)
  assert np.array_equal(got, convolution.mix_rows(weights, basis),
                        equal_nan=True)
  near = np.isfinite(got) & (got > np.max(basis, axis=0) - 40)
  assert np.all(bound[near] < 1e-13)
  for i, w in enumerate(weights):
    for z in range(basis.shape[1]):
      exact = mpmath.fsum(mpmath.mpf(float(wk)) * mpmath.exp(mpmath.mpf(b))
                          for wk, b in zip(w, basis[:, z])
                          if wk > 0 and np.isfinite(b))
      if exact == 0:
        assert got[i, z] == -np.inf
      else:
        assert abs(mpmath.mpf(got[i, z]) - mpmath.log(exact)) <= bound[i, z], (
            i, z)


def test_rows_convolved_after_the_others_sum_match_one_sum_per_row():
  """`with_sum` at >= `Limits.fft_levels` levels: the others' law once and the rows
  by matrix products equals one tilted sum per row (RQM 128 levels, rows
  the ±c laws, 5 + 3 others at the ends), to 1e-9 in log."""
  mech = mechanisms.RQM(1.0, 4.0, 128, 0.3)
  plus, minus = divergence.end_log_pmfs(mech)
  rows, parts = np.stack([plus, minus]), [(plus, 5), (minus, 3)]
  once, lost = convolution.with_sum(rows, parts)
  assert lost == -np.inf
  per_row = convolution.with_sum(
      rows, parts, limits=secure_sum.Limits(product_convolve=0))[0]
  finite = np.isfinite(per_row)
  assert np.array_equal(finite, np.isfinite(once))
  np.testing.assert_allclose(once[finite], per_row[finite], rtol=0, atol=1e-9)


def test_an_others_sum_cut_at_a_tail_reports_the_mass_it_drops():
  """`with_sum` with a tail (RQM 128 levels, 40 + 30 others at the ends):
  the rows convolved with the cut law miss at most the row's mass times
  e^lost of the uncut convolution, and the cut law is shorter."""
  mech = mechanisms.RQM(1.0, 4.0, 128, 0.3)
  plus, minus = divergence.end_log_pmfs(mech)
  rows, parts = np.stack([plus, minus]), [(plus, 40), (minus, 30)]
  whole, none = convolution.with_sum(rows, parts)
  cut, lost = convolution.with_sum(rows, parts, tail=20.0)
  assert none == -np.inf and np.isfinite(lost) and cut.shape[1] < whole.shape[1]
  mass = lambda a: np.exp(np.logaddexp.reduce(a, axis=1))
  missing = mass(whole) - mass(cut)
  assert np.all(missing >= -1e-13)
  assert np.all(missing <= mass(rows) * math.exp(lost) + 1e-13)


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


def _many_pairs(num_pairs, levels, rows=64, seed=0):
  """TargetPairs over `rows` random basis laws, `num_pairs` pairs of them."""
  from tff_quant.accounting.secure_sum import targets as targets_lib  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(seed)
  basis = np.log(rng.dirichlet(np.ones(levels), size=rows))
  pairs = rng.integers(0, rows, size=(num_pairs, 2))
  eye = np.eye(rows)
  return targets_lib.TargetPairs(basis, eye, eye, pairs, np.ones(num_pairs),
                                 'vertices', False), basis


def test_pair_log_sums_without_a_law_error_in_blocks_equals_at_once():
  # 4,096 levels: 1,024 pairs a block, so 2,500 pairs take three.
  targets, conv = _many_pairs(2500, 4096)
  orders = np.array([2.0, 8.0])
  blocked = convolution.pair_log_sums(targets, conv, orders)
  up = convolution.mix_rows(targets.upper_weights, conv)
  whole = matrix_sums.log_power_sums(up[targets.pairs[:, 0]],
                                     up[targets.pairs[:, 1]], orders, 0.0)
  np.testing.assert_allclose(blocked, whole, rtol=0, atol=1e-12)


_CAPPED = r'''
import resource, sys
import numpy as np
import pytest
sys.path.insert(0, sys.argv[1])
from tests.accounting.secure_sum.convolution_test import _many_pairs
from tff_quant.accounting.secure_sum import convolution
targets, conv = _many_pairs(60000, 4096, rows=8)
soft, hard = resource.getrlimit(resource.RLIMIT_AS)
# What the process holds now plus 1 GiB: the pairs' rows gathered at once
# (60,000 x 4,096 float64, twice: 3.9 GB) would not fit.
with open('/proc/self/statm') as f:
  held = int(f.read().split()[0]) * resource.getpagesize()
resource.setrlimit(resource.RLIMIT_AS, (held + 2**30, hard))
out = convolution.pair_log_sums(targets, conv, np.array([2.0]))
print('OK', out.shape, bool(np.all(np.isfinite(out))))
'''


def test_pair_log_sums_stays_within_a_memory_cap():
  import os, subprocess, sys  # pylint: disable=g-import-not-at-top,multiple-imports
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
      os.path.abspath(__file__)))))
  res = subprocess.run([sys.executable, '-c', _CAPPED, root], cwd=root,
                       capture_output=True, text=True, timeout=600)
  assert res.returncode == 0, res.stderr[-2000:]
  assert res.stdout.split() == ['OK', '(1,', '60000)', 'True']


def test_window_max_is_the_largest_law_entry_each_output_reads():
  rng = np.random.default_rng(0)
  for n in (1, 5, 17):
    for width in (1, 2, 7, 33):
      values = rng.uniform(size=n)
      want = [max(values[z - k] for k in range(width) if 0 <= z - k < n)
              for z in range(n + width - 1)]
      np.testing.assert_array_equal(convolution.window_max(values, width), want)


@pytest.mark.parametrize('limits', [
    secure_sum.Limits(), secure_sum.Limits(fft_levels=1000),
    secure_sum.Limits(product_convolve=0)])
def test_rows_with_the_others_sum_are_within_their_proved_error(limits):
  """`with_sum(..., with_error=True)` (RQM 128 levels, rows the ±c laws,
  40 + 30 others at the ends): the law once and matrix products (at and
  below `fft_levels`) or one tilted sum per row; every finite entry within
  its `ColumnError` of the 80-bit direct convolution, and that bound under
  1e-8 within e^5 of each row's top. (Cut at a tail, the end-to-end check
  is any_others_test's, against the uncut law.)"""
  mech = mechanisms.RQM(1.0, 4.0, 128, 0.3)
  plus, minus = divergence.end_log_pmfs(mech)
  rows, parts = np.stack([plus, minus]), [(plus, 40), (minus, 30)]
  conv, err, lost = convolution.with_sum(rows, parts, limits=limits,
                                         with_error=True)
  assert lost == -np.inf
  ld = np.longdouble
  others = np.ones(1, ld)
  for lp, count in parts:
    for _ in range(count):
      others = np.convolve(others, np.exp(np.asarray(lp, ld)))
  bound = err.entry.at(conv) + err.column[None, :]
  for i, row in enumerate(rows):
    exact = np.convolve(np.exp(np.asarray(row, ld)), others)
    live = np.isfinite(conv[i]) & (exact > np.finfo(ld).tiny)
    miss = np.abs(conv[i][live] - np.log(exact[live]).astype(np.float64))
    assert np.all(miss <= bound[i][live]), np.max(miss - bound[i][live])
  near = conv >= np.max(conv, axis=1, keepdims=True) - 5
  assert np.max(bound[near]) < 1e-8
