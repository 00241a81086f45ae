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


def test_noise_sum_error_covers_the_exact_circular_sum_and_its_divergences():
  """W_n's proved error (`noise_sum_log_error`) holds at every residue
  against the exact n-fold circular convolution (mpmath) of the one-client
  wrapped law as computed, and `sum_divergences` stays above the exact
  shift divergences of that W_n."""
  import mpmath  # pylint: disable=g-import-not-at-top
  mpmath.mp.prec = 160
  mech = ddgauss.DistributedDiscreteGaussian(clip=1.0, num_levels=64, steps=4,
                                             noise_std=2.0)
  n, m = 6, 64
  one = [mpmath.exp(mpmath.mpf(float(v))) for v in mech.noise_sum_log_pmf(1)]
  exact = one
  for _ in range(n - 1):
    exact = [mpmath.fsum(exact[i] * one[(k - i) % m] for i in range(m))
             for k in range(m)]
  log_exact = [mpmath.log(v) for v in exact]
  w, err = mech.noise_sum_log_pmf(n), mech.noise_sum_log_error(n)
  gaps = [abs(float(mpmath.mpf(float(a)) - b)) for a, b in zip(w, log_exact)]
  assert all(g <= e for g, e in zip(gaps, err))
  assert float(np.max(err)) < 1e-9
  gamma = mech.gamma
  got = mech.sum_divergences([2.0, 8.0, math.inf], n, [gamma, 2.5 * gamma])
  for a in (2.0, 8.0, math.inf):
    for idx, shift in enumerate((1.0, 2.5)):
      j, f = int(shift), shift - int(shift)
      shifted = [(1 - f) * exact[(k - j) % m] + f * exact[(k - j - 1) % m]
                 for k in range(m)]
      if math.isinf(a):
        want = max(mpmath.log(p / q) for p, q in zip(exact, shifted))
        want = max(want, max(mpmath.log(q / p) for p, q in zip(exact, shifted)))
      else:
        want = max(mpmath.log(mpmath.fsum(p**a * q**(1 - a) for p, q in
                                          zip(x, y))) / (a - 1)
                   for x, y in ((exact, shifted), (shifted, exact)))
      assert got[a][idx] >= float(want)
