import math

import numpy as np
import pytest

from tff_quant import accounting
from tff_quant.accounting import bounds
from tff_quant.mechanisms import ddgauss

PARAMS = [dict(clip=1.0, num_levels=256, steps=4, noise_std=3.0),
          dict(clip=0.02, num_levels=1024, steps=60, noise_std=0.7)]
ORDERS = [2, 4, 8, 16, 32]


def test_single_client_is_the_gaussian_at_integer_shifts_and_orders():
  # D_α(N_Z(0,σ²) || N_Z(Δ,σ²)) = αΔ²/(2σ²) exactly for integer α and Δ.
  mech = ddgauss.DistributedDiscreteGaussian(clip=1.0, num_levels=2**14, steps=4,
                                             noise_std=5.0)
  exact = accounting.per_round_rdp(mech, 1, 1, ORDERS)
  for a in ORDERS:
    assert exact[a] == pytest.approx(a * 8**2 / (2 * 25.0), rel=1e-9)


@pytest.mark.parametrize('n, steps, noise_std, levels', [
    (10, 8, 6.0, 2**11), (40, 4, 2.0, 2**9), (100, 16, 4.0, 2**9)])
def test_exact_rdp_is_below_kairouz_liu_steinke_and_near_the_gaussian(
    n, steps, noise_std, levels):
  mech = ddgauss.DistributedDiscreteGaussian(clip=1.0, num_levels=levels,
                                             steps=steps, noise_std=noise_std)
  exact = accounting.per_round_rdp(mech, n, 1, ORDERS)
  var = float(np.exp(mech.noise_sum_log_pmf(1)) @ np.minimum(
      np.arange(mech.m), mech.m - np.arange(mech.m))**2)
  for a in ORDERS:
    assert exact[a] <= bounds.ddgauss_rdp(a, mech, n) * (1 + 1e-9)
    # Where the modulus does not bind (the tilted mean α·Δ plus 10 std of the
    # sum inside M/2) the sum of n discrete Gaussians is within 1e-4 of the
    # continuous Gaussian of equal variance; wraparound only lowers D_α.
    if a * 2 * steps + 10 * np.sqrt(n * var) < levels / 2:
      gaussian = a * (2 * steps)**2 / (2 * n * var)
      assert exact[a] >= gaussian * (1 - 1e-4)


def test_unresolvable_sum_is_a_clear_error():
  mech = ddgauss.DistributedDiscreteGaussian(clip=1.0, num_levels=2**12, steps=4,
                                             noise_std=0.9)
  with pytest.raises(ValueError, match='raise noise_std'):
    mech.noise_sum_log_pmf(40)


def test_sum_too_large_to_convolve_is_refused_before_starting():
  mech = ddgauss.DistributedDiscreteGaussian(clip=1.0, num_levels=2**20, steps=4,
                                             noise_std=3.0)
  with pytest.raises(ValueError, match='num_levels or clients_per_round'):
    mech.noise_sum_log_pmf(100)
  assert math.isfinite(mech.noise_sum_log_pmf(1)[0])


def edge_mechanisms(c):
  """The distributed discrete Gaussian at clip c with r = 128 and almost no
  noise, so the rounded shift shows: a float32 clip gave j = r + 1 in
  5.9e-6 of the draws at float32(c), c = 0.0331 (contract_test.py)."""
  return [ddgauss.DistributedDiscreteGaussian(c, 2**12, 128, 1e-3)]
