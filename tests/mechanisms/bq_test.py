import itertools

import numpy as np
import pytest
from scipy import stats

from tests.mechanisms import mechanism_checks as checks
from tff_quant.mechanisms import bq

PARAMS = [dict(clip=1.0, s=3, m=4), dict(clip=0.01, s=1, m=0),
          dict(clip=2.0, s=7, m=30)]


def test_pmf_is_rounding_convolved_with_binomial():
  mech = bq.BQ(clip=1.0, s=4, m=10)
  x = -0.3  # x s / C = -1.2: -1 w.p. 0.8, -2 w.p. 0.2
  rounding = np.zeros(9)
  rounding[4 - 1] = 0.8
  rounding[4 - 2] = 0.2
  expected = np.convolve(rounding, stats.binom.pmf(np.arange(11), 10, 0.5))
  np.testing.assert_allclose(mech.pmf(x), expected, atol=1e-15)
  assert mech.num_levels == 2 * 4 + 10 + 1


@pytest.mark.parametrize('params', PARAMS[:2])
def test_decode_unbiased_for_negative_and_positive(params):
  mech = bq.BQ(**params)
  for x in [-mech.clip, -0.43 * mech.clip, 0.3 * mech.clip, mech.clip]:
    checks.assert_decode_unbiased(mech, x)


@pytest.mark.parametrize('kwargs, name, error', [
    (dict(clip=0.0), 'clip', ValueError), (dict(s=0), 's', ValueError), (dict(s=2.0), 's', TypeError),
    (dict(m=-1), 'm', ValueError)])
def test_invalid_params_raise(kwargs, name, error):
  with pytest.raises(error, match=f'`{name}`'):
    bq.BQ(**dict(PARAMS[0], **kwargs))


def test_log_pmf_has_no_nan_where_x_s_over_c_rounds_past_s():
  mech = bq.BQ(0.0015, 6, 40)  # 0.0015 * 6 / 0.0015 = 6.000000000000001
  for x in (mech.clip, -mech.clip):
    lp = mech.log_pmf(x)
    assert not np.isnan(lp).any()
    assert np.exp(lp).sum() == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize('x, x_prime', [(0.1, 0.3), (-0.9, -0.7), (0.34, 0.66)])
def test_sum_reduction_is_the_sum_with_others_on_the_grid(x, x_prime):
  """One client with Binomial(n·m, 1/2) noise has the n-client sum's D_α when
  the others sit on the rounding grid, and bounds it at any other inputs."""
  from tff_quant.accounting import divergence  # pylint: disable=g-import-not-at-top
  mech, n = bq.BQ(clip=1.0, s=3, m=6), 3
  red = mech.sum_reduction(n)
  assert (red.copies, red.num_clients, red.mechanism.m) == (1, 1, 18)
  assert mech.sum_reduction(1) is None and mech.m == 6
  def sum_divergence(others):
    rest = [(mech.log_pmf(o), 1) for o in others]
    p = divergence.sum_log_pmf([(mech.log_pmf(x), 1)] + rest)
    q = divergence.sum_log_pmf([(mech.log_pmf(x_prime), 1)] + rest)
    return divergence.renyi_divergence(p, q, 4.0)
  one = divergence.renyi_divergence(red.mechanism.log_pmf(x),
                                    red.mechanism.log_pmf(x_prime), 4.0)
  assert np.isfinite(one) and one > 0
  assert one == pytest.approx(sum_divergence([1 / 3, -1.0]), rel=1e-9)
  assert sum_divergence([0.2, -0.55]) <= one * (1 + 1e-9)


# Conditioning on a window (BQ's finite-support noise makes every Rényi
# divergence infinite; the RDP routes account the sum conditioned on a
# window, `BQ._conditioned_sum`).
def _sum_pmf(mech, inputs):
  """The exact law of the secure sum of level indices for `inputs`."""
  law = np.ones(1)
  for x in inputs:
    law = np.convolve(law, mech.pmf(x))
  return law


@pytest.mark.parametrize('s, m, n, tail', [(1, 60, 2, 1e-3), (2, 40, 3, 1e-6),
                                           (1, 200, 2, 1e-14)])
def test_window_is_missed_at_most_tail_for_any_inputs(s, m, n, tail):
  mech = bq.BQ(1.0, s, m)
  cond = mech.conditioned_sum(n, tail)
  lo, hi = cond.window
  grid = np.linspace(-1.0, 1.0, 4 * s + 1)   # the vertices and midpoints
  worst = 0.0
  for inputs in itertools.product(grid, repeat=n):
    law = _sum_pmf(mech, inputs)
    worst = max(worst, law[:lo].sum() + law[hi + 1:].sum())
  assert worst <= cond.tail <= tail
  assert cond.num_clients == 1 and cond.mechanism.m == n * m


def test_windowed_law_is_the_every_clients_noise_law_restricted():
  mech = bq.BQ(0.5, 2, 50)
  cond = mech.conditioned_sum(4, 1e-10)
  one, full = cond.mechanism, bq.BQ(0.5, 2, 200)
  assert 0 < one.lo and one.hi < full.num_levels - 1
  for x in (-0.5, -0.2, 0.0, 0.31, 0.5):
    np.testing.assert_array_equal(one.log_pmf(x),
                                  full.log_pmf(x)[one.lo:one.hi + 1])
    # Inside every input's support: finite everywhere, mass just below 1.
    assert np.all(np.isfinite(one.log_pmf(x)))
    assert 1 - 1e-9 < one.pmf(x).sum() <= 1 + 1e-9
  np.testing.assert_array_equal(one.critical_inputs(), mech.critical_inputs())


def test_no_window_where_the_noise_is_too_small():
  # Binomial(12, 1/2): any window missed w.p. <= 1e-14 reaches past the
  # range every input's sum shares.
  assert bq.BQ(1.0, 2, 4).conditioned_sum(3, 1e-14) is None
  with pytest.raises(ValueError, match='`tail`'):
    bq.BQ(1.0, 2, 40).conditioned_sum(3, 0.0)


def edge_mechanisms(c):
  """BQ at clip c where a float32 x·s/C stepped past ±s at c = 0.0331
  (contract_test.py): s = 1024 (1.2e-4 of the draws at ±float32(c)), s = 1
  (the issue's: u = ±2), and the paper's noise."""
  return [bq.BQ(c, 1024, 0), bq.BQ(c, 1, 0), bq.BQ(c, 2, 251)]


def test_the_sum_reductions_error_bound_is_its_own_not_the_one_clients():
  """η is computed once per mechanism; the reduction (n·m trials) must not
  inherit the one-client value computed before it was made."""
  mech = bq.BQ(clip=1.0, s=3, m=600)
  one_client = mech.log_pmf_error            # computed and kept first
  reduced = mech.sum_reduction(50).mechanism
  fresh = bq.BQ(clip=1.0, s=3, m=600)
  fresh.m = 600 * 50
  assert reduced.log_pmf_error == fresh.log_pmf_error
  assert reduced.log_pmf_error != one_client
