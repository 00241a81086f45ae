"""Tests for tff_quant/accounting/matrix_sums.py: every value is checked against
50-digit arithmetic on the same float64 inputs, and must sit within its stated
error bound (convolutions) or at or above the exact value (power sums)."""

import math

import mpmath
import numpy as np
import pytest

from tff_quant import mechanisms
from tff_quant.accounting import matrix_sums
from tff_quant.accounting import secure_sum
from tff_quant.accounting.secure_sum import convolution
from tff_quant.common import exact_laws

mpmath.mp.dps = 50


def _exact_convolve(log_rows, log_law):
  """log of each row convolved with the law, in 50 digits (the float64 log
  values taken as exact)."""
  law = [mpmath.exp(mpmath.mpf(v)) if np.isfinite(v) else mpmath.mpf(0)
         for v in log_law]
  out = []
  for row in np.atleast_2d(log_rows):
    r = [mpmath.exp(mpmath.mpf(v)) if np.isfinite(v) else mpmath.mpf(0)
         for v in row]
    sums = [mpmath.fsum(r[k] * law[z - k] for k in range(len(r))
                        if 0 <= z - k < len(law))
            for z in range(len(law) + len(r) - 1)]
    out.append([mpmath.log(s) if s > 0 else -mpmath.inf for s in sums])
  return out


def _sharp_law(size, slope, seed):
  """A log-pmf falling by `slope` per index from a random peak: tails far
  below e^-708 (the convolution's per-block scaling and log-domain fallback)."""
  rng = np.random.default_rng(seed)
  peak = size // 3
  log = -slope * np.abs(np.arange(size) - peak) + rng.uniform(-1, 0, size)
  return log - np.logaddexp.reduce(log)


@pytest.mark.parametrize('slope', [0.01, 3.0, 60.0])
def test_convolution_is_within_its_error_bound(slope):
  """Flat, steep and very steep laws (some sums below 2^-900 of their scale,
  recomputed in the log domain): every entry within the returned bound of
  50-digit arithmetic, and the bound under 1e-11."""
  rows = np.stack([_sharp_law(7, slope, s) for s in range(5)])
  rows[1, 2] = -np.inf   # an exact zero stays one
  law = _sharp_law(40, slope, 9)
  out, err = matrix_sums.convolve(rows, 0.0, law, 0.0)
  exact = _exact_convolve(rows, law)
  assert err < 1e-11
  for i, row in enumerate(exact):
    for z, value in enumerate(row):
      if value == -mpmath.inf:
        assert out[i, z] == -np.inf
      else:
        assert abs(mpmath.mpf(out[i, z]) - value) <= err, (i, z)


def test_powers_are_within_their_error_bound():
  """R^{*m} by one copy at a time: within its bound of 50 digits, at every m asked
  in any order (the kept laws are reused)."""
  log_r = _sharp_law(6, 0.7, 3)
  powers = matrix_sums.Powers(log_r)
  for m in (5, 2, 7):
    law, err = powers(m)
    r = [mpmath.exp(mpmath.mpf(v)) for v in log_r]
    cur = [mpmath.mpf(1)]
    for _ in range(m):
      cur = [mpmath.fsum(r[k] * cur[z - k] for k in range(len(r))
                         if 0 <= z - k < len(cur))
             for z in range(len(cur) + len(r) - 1)]
    ref = [mpmath.log(v) for v in cur]
    assert len(law) == len(ref)
    assert max(abs(mpmath.mpf(a) - b) for a, b in zip(law, ref)) <= err
    assert err < 1e-11


def test_powers_restart_from_the_nearest_checkpoint(monkeypatch):
  """A count asked below the last starts from the checkpoint under it: the
  same additions as from 0, so the same law."""
  monkeypatch.setattr(matrix_sums, 'CHECKPOINT', 2)
  log_r = _sharp_law(6, 0.7, 3)
  reused, fresh = matrix_sums.Powers(log_r), lambda m: matrix_sums.Powers(
      log_r)(m)
  for m in (7, 3, 5):
    law, err = reused(m)
    ref, ref_err = fresh(m)
    assert np.array_equal(law, ref) and err == ref_err
  assert set(reused._kept) == {0, 2, 3, 4, 5, 6, 7}


def test_powers_cut_at_a_tail_lose_at_most_the_mass_they_report():
  """With a tail, R^{*m} is cut at both ends: each kept entry at most err
  above 50-digit arithmetic at its place in the exact law (a translation:
  the cut law is a part of it), and the exact mass missing from it (dropped
  at any step) at most e^log_dropped(m); without a tail nothing is reported
  dropped."""
  log_r = _sharp_law(9, 1.5, 4)
  assert matrix_sums.Powers(log_r).log_dropped(6) == -np.inf
  powers = matrix_sums.Powers(log_r, tail=12.0)
  r = [mpmath.exp(mpmath.mpf(v)) for v in log_r]
  for m in (6, 3, 8):
    law, err = powers(m)
    lost = powers.log_dropped(m)
    cur = [mpmath.mpf(1)]
    for _ in range(m):
      cur = [mpmath.fsum(r[k] * cur[z - k] for k in range(len(r))
                         if 0 <= z - k < len(cur))
             for z in range(len(cur) + len(r) - 1)]
    assert law.size < len(cur) and np.isfinite(lost)
    shift = int(np.argmax([float(v) for v in cur])) - int(np.argmax(law))
    for z, value in enumerate(law):
      assert mpmath.mpf(value) - mpmath.log(cur[z + shift]) <= err
    missing = mpmath.fsum(cur) - mpmath.fsum(mpmath.exp(mpmath.mpf(v))
                                             for v in law)
    assert 0 < missing <= mpmath.exp(lost), (m, missing, lost)


def _exact_power_sum(p, q, alpha):
  terms = [mpmath.exp(alpha * mpmath.mpf(a) + (1 - alpha) * mpmath.mpf(b))
           for a, b in zip(p, q) if np.isfinite(a)]
  return mpmath.log(mpmath.fsum(terms))


@pytest.mark.parametrize('spread', [1e-3, 0.5, 8.0])
def test_power_sums_lie_at_or_above_the_exact_value(spread):
  """Nearly equal laws (the float floor), distinct ones, and laws whose ratios'
  powers overflow the product's scaling at α = 200 (summed one by one): every
  pair's value in [exact, exact + 1e-9·(α-1)], by the matrix path and by the
  pair-by-pair path."""
  rng = np.random.default_rng(1)
  base = _sharp_law(300, 0.05, 4)
  rows = base + spread * rng.uniform(-1, 1, (6, base.size))
  rows -= np.logaddexp.reduce(rows, axis=1)[:, None]
  pairs = np.array([(i, j) for i in range(6) for j in range(6)])
  orders = np.array([2.0, 8.0, 200.0])
  dense = matrix_sums.pair_log_sums(rows, rows, pairs, orders, 0.0)
  sparse = matrix_sums.pair_log_sums(rows, rows, pairs[:2], orders, 0.0)
  # Over the memory cap the core pairs are summed in blocks instead.
  capped = matrix_sums.pair_log_sums(rows, rows, pairs, orders, 0.0,
                                     max_dense_bytes=100)
  for n, alpha in enumerate(orders):
    for m, (i, j) in enumerate(pairs):
      exact = _exact_power_sum(rows[i], rows[j], alpha)
      assert exact <= dense[n, m] <= exact + 1e-9 * (alpha - 1), (alpha, i, j)
      assert exact <= capped[n, m] <= exact + 1e-9 * (alpha - 1), (alpha, i, j)
      if m < 2:
        assert exact <= sparse[n, m] <= exact + 1e-9 * (alpha - 1)


def test_far_tails_are_bounded_not_summed():
  """Laws falling by 1 per index: the indices where no term reaches e^-60
  are cut, and the sums still lie in [exact, exact + 1e-9·(α-1)]."""
  rng = np.random.default_rng(3)
  base = _sharp_law(400, 1.0, 6)
  rows = base + 0.5 * rng.uniform(-1, 1, (2, base.size))
  rows -= np.logaddexp.reduce(rows, axis=1)[:, None]
  orders = np.array([2.0, 8.0])
  kept, _, lost = matrix_sums._cut_tail(rows[:1], rows[1:], orders)
  assert kept.shape[1] < 0.5 * base.size and np.all(lost < -50)
  got = matrix_sums.log_power_sums(rows[:1], rows[1:], orders, 0.0)[:, 0]
  for n, alpha in enumerate(orders):
    exact = _exact_power_sum(rows[0], rows[1], alpha)
    assert exact <= got[n] <= exact + 1e-9 * (alpha - 1), alpha


def test_a_pair_with_no_mass_sums_to_zero_not_nan():
  """A row that is all -inf (nothing cut): log 0 = -inf, not NaN."""
  rows = np.stack([_sharp_law(50, 0.05, 1), np.full(50, -np.inf)])
  got = matrix_sums.log_power_sums(rows[1:], rows[:1], np.array([2.0]), 0.0)
  assert got[0, 0] == -np.inf


@pytest.mark.parametrize('spread', [1e-3, 0.5, 8.0])
def test_lower_power_sums_lie_at_or_below_the_exact_value(spread):
  """`lower=True`: the same sums with the allowance taken the other way, in
  [exact - 1e-9·(α-1), exact], for inputs exact and inputs off by their err."""
  rng = np.random.default_rng(2)
  base = _sharp_law(300, 0.05, 5)
  rows = base + spread * rng.uniform(-1, 1, (2, base.size))
  rows -= np.logaddexp.reduce(rows, axis=1)[:, None]
  orders = np.array([2.0, 8.0, 64.0])
  err = 1e-10
  for off in (0.0, err):
    # the worst inputs within err for a lower bound: P down, Q up
    got = matrix_sums.log_power_sums((rows[0] + off)[None], (rows[1] - off)[None],
                                     orders, err, lower=True)[:, 0]
    for n, alpha in enumerate(orders):
      exact = _exact_power_sum(rows[0], rows[1], alpha)
      assert exact - 1e-9 * (alpha - 1) <= got[n] <= exact, (alpha, off)


def test_matrix_path_leaves_out_orders_it_cannot_scale():
  """A zero where another law is positive, or (α-1)·log ratio over 700: the
  order is left to the pair-by-pair sums (which give +inf for a zero)."""
  with np.errstate(divide='ignore'):
    rows = np.log(np.array([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5]]))
  assert matrix_sums._power_matrices(rows, rows, np.array([2.0])) == {}
  out = matrix_sums.pair_log_sums(rows, rows, np.array([[0, 0], [1, 0], [0, 1]]),
                                  np.array([2.0]), 0.0)
  assert out[0, 1] == np.inf and np.isfinite(out[0, 0]) and np.isfinite(out[0, 2])
  wide = np.log(np.array([[0.5, 0.5], [1e-5, 1 - 1e-5]]))
  got = matrix_sums._power_matrices(wide, wide, np.array([2.0, 80.0]))
  assert list(got) == [0]


def test_allowance_covers_inputs_off_by_their_error():
  """Inputs known to within err in log: the sum reads at least the exact one of
  the worst inputs within err (2α - 1 times err, first order)."""
  p, q = np.log([0.4, 0.6]), np.log([0.5, 0.5])
  err = 1e-9
  for alpha in (2.0, 16.0):
    got = matrix_sums.pair_log_sums(p[None], q[None], np.array([[0, 0]]),
                                    np.array([alpha]), err)[0, 0]
    worst = _exact_power_sum(p + err * np.sign(p - q) + err * (p == q),
                             q - err * np.sign(p - q), alpha)
    assert got >= worst


def test_matrix_sums_match_the_tilted_fft_route():
  """QMGeo at 64 levels, n = 20: the others' law and every target row's sum
  by `matrix_sums` agree with the tilted-FFT sums to 1e-10 (log)."""
  mech = mechanisms.QMGeo(1.0, 64, 0.01, full_support=True)
  log_r = secure_sum.common_part(mech)[1]
  law, err = matrix_sums.Powers(log_r)(19)
  basis = np.stack([mech.log_pmf(x) for x in mech.levels])
  ours, err = matrix_sums.convolve(basis, 0.0, law, err)
  fft = convolution.with_sum(basis, [(log_r, 19)])[0]
  np.testing.assert_allclose(ours, fft, rtol=0, atol=1e-10)
  assert err < 1e-11


@pytest.mark.parametrize('call,match', [
    (lambda: matrix_sums.Powers(np.log([0.5, 0.5]))(-1), '`m`'),
    (lambda: matrix_sums.Powers(np.log([0.5, 0.5]))(1.5), '`m`'),
    (lambda: matrix_sums.convolve(np.zeros((1, 2)), -1.0, np.zeros(3), 0.0),
     'rows_err'),
    (lambda: matrix_sums.convolve(np.zeros((1, 2)), 0.0, np.zeros(3), math.nan),
     'law_err'),
    (lambda: matrix_sums.convolve(np.zeros((1, 2)), 0.0, np.zeros(0), 0.0),
     'log_law'),
    (lambda: matrix_sums.EntryError.fit(np.zeros(3), np.zeros(4)), '`errors`'),
    (lambda: matrix_sums.EntryError.fit(np.array([1e-16, -1e-16]),
                                        np.zeros(2)), '`errors`'),
])
def test_bad_input_names_the_parameter(call, match):
  """A count or error bound out of range, or an empty law: one error naming it
  (a non-integer count is a TypeError, as `validation` raises everywhere)."""
  with pytest.raises((ValueError, TypeError), match=match):
    call()


def test_blocks_are_the_longest_runs_one_scale_serves():
  """`_blocks` (its span scanned 4 windows first, doubled while all fits):
  contiguous blocks covering the output, each at least `width` long unless
  at the end and at most `step`; past the first window each keeps its
  windows' finite log values within _SPAN, and each is the longest such run
  (one more index would exceed it, unless `step` or the end stops it). On
  laws from flat to far steeper than _SPAN per window, with gaps."""
  def spread(values):
    finite = values[np.isfinite(values)]
    return finite.max() - finite.min() if finite.size else 0.0

  rng = np.random.default_rng(0)
  for _ in range(200):
    n, width = int(rng.integers(1, 4000)), int(rng.integers(1, 300))
    law = -np.cumsum(rng.exponential(rng.choice([0.01, 1.0, 50.0, 400.0]), n))
    law[rng.random(n) < 0.05] = -np.inf
    padded = np.concatenate([np.full(width - 1, -np.inf), law,
                             np.full(width - 1, -np.inf)])
    length, step = n + width - 1, max(width, int(rng.integers(1, 3000)))
    z = 0
    for z0, z1 in matrix_sums._blocks(padded, length, width, step):
      assert z0 == z and min(width, length - z0) <= z1 - z0 <= step
      if z1 - z0 > width:
        assert spread(padded[z0:z1 + width - 1]) <= matrix_sums._SPAN
      if z1 < length and z1 - z0 < step:
        assert spread(padded[z0:z1 + width]) > matrix_sums._SPAN
      z = z1
    assert z == length


@pytest.mark.parametrize('tail', [-1.0, float('nan'), -float('inf')])
def test_a_bad_tail_is_refused_naming_it(tail):
  with pytest.raises(ValueError, match='`tail`'):
    matrix_sums.Powers(np.log([0.5, 0.5]), tail)


def test_convolution_bound_holds_entry_by_entry_and_is_small_in_the_bulk():
  """`EntryError`: every entry within const + slope·|value| of 50-digit
  arithmetic, with inputs carrying per-entry errors of their own (the
  exact inputs moved within them, both ways); the bound at the law's mode
  under 1/3 of the uniform one (its deepest entry's)."""
  rows = np.stack([_sharp_law(9, 1.5, s) for s in range(3)])
  law = _sharp_law(60, 1.0, 7)
  rows_err = matrix_sums.EntryError(3e-14, 2e-15, rows)
  law_err = matrix_sums.EntryError(5e-14, 4e-15, law)
  out, err = matrix_sums.convolve(rows, rows_err, law, law_err)
  assert isinstance(err, matrix_sums.EntryError)
  bound = err.at(out)
  assert np.all(bound <= float(err))
  mode = np.argmax(out, axis=1)
  assert np.all(bound[np.arange(3), mode] < float(err) / 3)
  for sign in (1, -1):
    # The exact laws: the given ones moved by their whole bound one way.
    exact = _exact_convolve(rows + sign * rows_err.at(rows),
                            law + sign * law_err.at(law))
    for i, row in enumerate(exact):
      for z, value in enumerate(row):
        if value != -mpmath.inf:
          assert abs(mpmath.mpf(out[i, z]) - value) <= bound[i, z], (i, z)


def test_powers_bound_holds_entry_by_entry():
  """R^{*m} (16 levels, m = 12): every entry within its own bound of 50
  digits, the bound in the bulk under 5e-13 (the uniform one, carried at
  the deepest entry, is larger)."""
  log_r = _sharp_law(16, 0.4, 2)
  law, err = matrix_sums.Powers(log_r)(12)
  bound = err.at(law)
  r = [mpmath.exp(mpmath.mpf(v)) for v in log_r]
  cur = [mpmath.mpf(1)]
  for _ in range(12):
    cur = [mpmath.fsum(r[k] * cur[z - k] for k in range(len(r))
                       if 0 <= z - k < len(cur))
           for z in range(len(cur) + len(r) - 1)]
  for z, value in enumerate(cur):
    assert abs(mpmath.mpf(law[z]) - mpmath.log(value)) <= bound[z], z
  bulk = law > np.max(law) - 5
  assert np.all(bound[bulk] < 5e-13) and float(err) > np.max(bound[bulk])


@pytest.mark.parametrize('seed', [0, 1, 2])
def test_a_fitted_entry_error_lies_above_every_entry_and_is_tight_one_nat_in(
    seed):
  """`EntryError.fit`: const + slope·|value| is at or above every per-entry
  bound (random bounds, and log_binomial's, which grow into the tails), the
  -inf entries ignored; one nat above the least |value| no line with slope
  >= 0 above the points is lower (it is the upper hull's tangent there:
  checked against every line through two of the points and every flat
  line)."""
  rng = np.random.default_rng(seed)
  law = -rng.exponential(6.0, size=40)
  law[[3, 17]] = -np.inf
  errors = rng.uniform(0, 1e-13, size=40) * (1 + np.abs(law))
  errors[[3, 17]] = np.nan   # ignored where the law is -inf
  fit = matrix_sums.EntryError.fit(errors, law)
  live = np.isfinite(law)
  assert np.all(errors[live] <= fit.at(law[live]))
  x, e = np.abs(law[live]), errors[live]
  x_ref = np.min(x) + 1
  best = np.max(e)   # the flat line
  for i in range(x.size):
    for j in range(x.size):
      if x[j] > x[i]:
        slope = (e[j] - e[i]) / (x[j] - x[i])
        if slope >= 0 and np.all(e <= e[i] + slope * (x - x[i]) * (1 + 1e-12)
                                 + 1e-30):
          best = min(best, e[i] + slope * (x_ref - x[i]))
  assert fit.at(np.array([x_ref]))[0] <= best * (1 + 1e-5)
  binomial, err = exact_laws.log_binomial(99, 0.5)
  fit = matrix_sums.EntryError.fit(err, binomial)
  assert np.all(err <= fit.at(binomial))
  assert fit.at(binomial[49:50])[0] < np.max(err) / 10   # bulk, not tail


@pytest.mark.parametrize('lower', [False, True])
def test_power_sums_carry_per_entry_input_errors(lower):
  """Inputs known entry by entry ((err_a, err_b) arrays, errors growing
  into the tails): at or above (with `lower`, at or below) the exact sum of
  the worst inputs within them, and within 1e-11·(α-1) of it."""
  rng = np.random.default_rng(4)
  base = _sharp_law(200, 0.08, 3)
  rows = base + 0.3 * rng.uniform(-1, 1, (2, base.size))
  rows -= np.logaddexp.reduce(rows, axis=1)[:, None]
  e_a = 1e-14 + 1e-14 * np.abs(rows[0])
  e_b = 2e-14 + 1e-14 * np.abs(rows[1])
  orders = np.array([2.0, 8.0, 64.0])
  got = matrix_sums.log_power_sums(rows[:1], rows[1:], orders,
                                   (e_a[None], e_b[None]), lower=lower)[:, 0]
  sign = -1 if lower else 1
  for n, alpha in enumerate(orders):
    worst = _exact_power_sum(rows[0] + sign * e_a, rows[1] - sign * e_b, alpha)
    if lower:
      assert worst - 1e-11 * (alpha - 1) <= got[n] <= worst, alpha
    else:
      assert worst <= got[n] <= worst + 1e-11 * (alpha - 1), alpha


def test_pair_sums_carry_an_entry_error_in_both_paths():
  """`pair_log_sums` with an `EntryError`: the matrix path and the pair
  path both at or above the exact sum of the worst inputs within the
  per-entry bound."""
  rng = np.random.default_rng(5)
  base = _sharp_law(120, 0.1, 6)
  rows = base + 0.2 * rng.uniform(-1, 1, (4, base.size))
  rows -= np.logaddexp.reduce(rows, axis=1)[:, None]
  err = matrix_sums.EntryError(1e-13, 3e-14, rows)
  pairs = np.array([(i, j) for i in range(4) for j in range(4)])
  orders = np.array([2.0, 16.0])
  dense = matrix_sums.pair_log_sums(rows, rows, pairs, orders, err)
  sparse = matrix_sums.pair_log_sums(rows, rows, pairs[:3], orders, err)
  for n, alpha in enumerate(orders):
    for m, (i, j) in enumerate(pairs):
      worst = _exact_power_sum(rows[i] + err.at(rows[i]),
                               rows[j] - err.at(rows[j]), alpha)
      assert worst <= dense[n, m], (alpha, i, j)
      if m < 3:
        assert worst <= sparse[n, m]


def test_pair_sums_refuse_orders_at_or_below_one():
  with pytest.raises(ValueError, match='`orders`'):
    matrix_sums.pair_log_sums(np.zeros((1, 2)), np.zeros((1, 2)),
                              np.array([[0, 0]]), np.array([1.0]), 0.0)


def test_blocked_power_sums_gather_a_few_pairs_at_a_time_and_stay_upper_bounds():
  """At 2^20 levels a block holds 4 pairs (_BLOCK entries): 10 pairs take 3
  blocks, each pair's sum is still at or above the exact one (and within
  1e-9 of it), whatever block it fell in."""
  from scipy import special  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(3)
  levels = 2**20
  rows = rng.normal(size=(4, levels)) * 3
  rows -= special.logsumexp(rows, axis=1, keepdims=True)
  pairs = np.array([[i % 4, (i * 3 + 1) % 4] for i in range(10)])
  orders = np.array([2.0, 8.0])
  got = matrix_sums.blocked_log_power_sums(rows, rows, pairs, orders)
  for j, (p, q) in enumerate(pairs):
    for i, a in enumerate(orders):
      exact = special.logsumexp(a * rows[p] + (1 - a) * rows[q])
      assert exact <= got[i, j] <= exact + 1e-9 * max(1.0, abs(exact))
