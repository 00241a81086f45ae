import math

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
  # scipy's ive(0, v) is NaN from v ≈ 2^31 (n = 1000 clients at σ = M/16,
  # M = 2^16 is v = 1.7e10); the asymptotic series takes over from 1e4.
  for v in (9e3, 1.1e4, 1e6, 1e9):   # both sides of the switch, scipy still exact
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
