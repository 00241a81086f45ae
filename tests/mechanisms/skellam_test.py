import math

import mpmath
import numpy as np
import pytest
from scipy import special
from scipy import stats

from tff_quant import accounting
from tff_quant.accounting import bounds
from tff_quant.mechanisms import modular
from tff_quant.mechanisms import skellam

PARAMS = [dict(clip=1.0, num_levels=256, steps=4, noise_std=3.0),
          dict(clip=0.02, num_levels=1024, steps=60, noise_std=0.7)]
ORDERS = [2, 4, 8, 16, 32]


@pytest.mark.parametrize('variance', [0.5, 9.0, 400.0])
def test_log_pmf_matches_scipy_and_keeps_precision_in_the_tails(variance):
  z = np.arange(-60, 61)
  ours = skellam.skellam_log_pmf(z, variance)
  ref = stats.skellam.logpmf(z, variance / 2, variance / 2)
  bulk = ref > -600
  np.testing.assert_allclose(ours[bulk], ref[bulk], rtol=1e-9, atol=1e-9)
  far = skellam.skellam_log_pmf(np.array([5000]), variance)[0]
  assert np.isfinite(far) and far < -2000   # no underflow to -inf
  wide = np.arange(-4000, 4001)
  assert math.isclose(np.exp(skellam.skellam_log_pmf(wide, variance)).sum(), 1.0,
                      rel_tol=1e-12)


def test_log_pmf_at_large_variance_keeps_scipy_precision_and_stays_finite():
  # No library Bessel function is used, so the law stays finite where scipy's
  # ive(0, v) is NaN (from v ≈ 2^31: n = 1000 clients at σ = M/16, M = 2^16
  # is v = 1.7e10).
  for v in (9e3, 1.1e4, 1e6, 1e9):   # scipy still exact here
    ref = np.log(special.ive(np.arange(3), v))
    np.testing.assert_allclose(skellam.skellam_log_pmf(np.arange(3), v), ref,
                               rtol=1e-14)
  v = 1000 * 4096.0**2
  sd = math.sqrt(v)
  z = np.arange(-int(12 * sd), int(12 * sd) + 1, 64)
  log_p = skellam.skellam_log_pmf(z, v)
  assert np.all(np.isfinite(log_p))
  # Riemann sum over steps of 64 (the pmf is smooth at this scale): total mass 1.
  assert math.isclose(64 * np.exp(log_p).sum(), 1.0, rel_tol=1e-9)
  mech = skellam.DistributedSkellam(clip=1.0, num_levels=2**16, steps=2**13,
                                    noise_std=4096.0)
  assert np.all(np.isfinite(mech.noise_sum_log_pmf(1000)))


def test_noise_sum_closed_form_equals_the_convolution():
  mech = skellam.DistributedSkellam(clip=1.0, num_levels=512, steps=8, noise_std=5.0)
  for n in (2, 7):
    closed = mech.noise_sum_log_pmf(n)
    conv = modular.ModularNoiseMechanism.noise_sum_log_pmf(mech, n)
    np.testing.assert_allclose(closed, conv, rtol=0, atol=1e-9)


@pytest.mark.parametrize('n, steps, noise_std', [(1, 4, 8.0), (10, 8, 6.0),
                                                 (100, 16, 3.0)])
def test_exact_rdp_is_below_agarwal_kairouz_liu(n, steps, noise_std):
  mech = skellam.DistributedSkellam(clip=1.0, num_levels=2**12, steps=steps,
                                    noise_std=noise_std)
  exact = accounting.per_round_rdp(mech, n, 1, ORDERS)
  for a in ORDERS:
    assert 0 < exact[a] <= bounds.skellam_rdp(a, mech, n), a


def test_skellam_is_below_the_equal_variance_gaussian():
  # Not a floor for a lattice law: Skellam's heavier tails give a smaller D_α
  # than N(0, σ²) at the same variance (n = 1, Δ = σ = 8: 0.99145 at α = 2,
  # 0.5268 of the Gaussian's at α = 32). Pinned so a change is noticed.
  mech = skellam.DistributedSkellam(clip=1.0, num_levels=2**12, steps=4,
                                    noise_std=8.0)
  exact = accounting.per_round_rdp(mech, 1, 1, [2, 32])
  assert exact[2] == pytest.approx(0.99145, abs=1e-5)
  assert exact[32] / (32 * 64 / (2 * 64)) == pytest.approx(0.52677, abs=1e-4)


@pytest.mark.parametrize('variance', [0.0, -1.0, math.nan])
def test_log_pmf_rejects_a_variance_that_is_not_positive(variance):
  with pytest.raises(ValueError, match='`variance` must be > 0'):
    skellam.skellam_log_pmf(np.arange(3), variance)


@pytest.mark.parametrize('noise_fraction, clients', [
    (0.0043, 100), (0.01, 100), (0.05, 30), (0.003, 10), (0.1, 200)])
def test_noise_sum_from_a_narrow_window_equals_the_full_window(
    noise_fraction, clients):
  m = 8192
  mech = skellam.DistributedSkellam(1.0, m, 16, noise_fraction * m)
  v = clients * mech.noise_std**2
  half = int(math.ceil(modular.WINDOW_MODULI * m + 40 * math.sqrt(v)))
  full = modular.wrap(skellam.skellam_log_pmf(np.arange(-half, half + 1), v),
                      -half, m)
  np.testing.assert_allclose(mech.noise_sum_log_pmf(clients), full, rtol=0,
                             atol=1e-13)


@pytest.mark.parametrize('t, variance', [(10, 4.0), (50, 20.0), (300, 1e4),
                                         (3000, 1e4)])
def test_chernoff_tail_bounds_the_exact_tail(t, variance):
  z = np.arange(t + 1, t + 40 * int(math.sqrt(variance)) + 200)
  exact = math.log(2) + special.logsumexp(skellam.skellam_log_pmf(z, variance))
  bound = skellam.skellam_log_tail(t, variance)
  assert exact <= bound <= exact + 2 + math.log(t + 2)   # not vacuous


def edge_mechanisms(c):
  """Skellam at clip c with r = 128 and almost no noise (variance 1e-14):
  a float32 clip gave the shift r + 1 (contract_test.py)."""
  return [skellam.DistributedSkellam(c, 2**12, 128, 1e-7)]


def exact_log_pmf(k, variance):
  """log(e^-v I_k(v)) in 40-digit arithmetic."""
  with mpmath.workdps(40):
    v = mpmath.mpf(variance)
    return mpmath.log(mpmath.besseli(int(k), v, maxterms=10**6)) - v


@pytest.mark.parametrize('variance', [1e-14, 0.5, 9.0, 400.0, 3e4])
def test_log_pmf_error_bounds_the_exact_law_and_is_not_vacuous(variance):
  """Issue 61, item 1 (Skellam): every entry within its proved bound of the
  40-digit value, from the mode to far tails, and the bound at most 1e-13
  of 1 + |log P| (measured: the deviation is 1-17% of the bound)."""
  sd = math.sqrt(variance)
  k = np.unique([0, 1, 2, int(sd), int(3 * sd), int(8 * sd) + 1, 700])
  got, bound = skellam.skellam_log_pmf_with_error(k, variance)
  for kk, g, b in zip(k, got, bound):
    assert abs(float(exact_log_pmf(kk, variance) - mpmath.mpf(g))) <= b, kk
  assert np.all(bound <= 1e-13 * (1 + np.abs(got)))


def test_variance_rounding_is_carried():
  """The law at v(1 + ε) read at v: covered with variance_rel_error = ε, and
  not by the rounding bound alone (the term is needed)."""
  v, eps = 400.0, 1e-9
  k = np.array([0, 20, 60, 200])
  got, plain = skellam.skellam_log_pmf_with_error(k, v)
  _, carried = skellam.skellam_log_pmf_with_error(k, v, eps)
  dev = np.array([abs(float(exact_log_pmf(kk, v * (1 + eps)) - mpmath.mpf(g)))
                  for kk, g in zip(k, got)])
  assert np.all(dev <= carried)
  assert np.any(dev > plain)


def test_noise_sum_error_bounds_the_exact_wrapped_law():
  """W_n mod M against 40-digit Skellam(nσ²) summed over its aliases, and the
  one-client η proved (no longer None)."""
  mech = skellam.DistributedSkellam(clip=1.0, num_levels=64, steps=4, noise_std=2.5)
  n = 3
  got, bound = mech.noise_sum_log_pmf(n), mech.noise_sum_log_error(n)
  v = n * 2.5**2
  with mpmath.workdps(40):
    for r in range(64):
      exact = mpmath.log(mpmath.fsum(mpmath.exp(exact_log_pmf(r + 64 * j, v))
                                     for j in range(-4, 5)))
      assert abs(float(exact - mpmath.mpf(got[r]))) <= bound[r], r
  assert 0 < mech.log_pmf_error < 1e-12
  assert np.max(bound) < 1e-12


def test_served_cells_carry_an_eta_near_1e_11():
  """The FL table's 16-bit cells (σ = 630, 720; M = 2^16): η and W_n's bound
  at n = 100 are 1.3-1.5e-11 (pinned so a loosened analysis is noticed)."""
  for std, steps in [(630.3736591864831, 128), (719.9025717038204, 64)]:
    mech = skellam.DistributedSkellam(0.017169436530685856, 2**16, steps, std)
    assert 1e-12 < mech.log_pmf_error < 3e-11
    assert np.max(mech.noise_sum_log_error(100)) < 3e-11


@pytest.mark.parametrize('eps', [-1e-9, 1e-3, math.nan])
def test_log_pmf_rejects_a_variance_error_out_of_range(eps):
  with pytest.raises(ValueError, match='`variance_rel_error` must be in'):
    skellam.skellam_log_pmf_with_error(np.arange(3), 4.0, eps)
