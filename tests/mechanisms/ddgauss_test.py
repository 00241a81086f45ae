import math

import numpy as np
import pytest

from tff_quant import accounting
from tff_quant.accounting import bounds
from tff_quant.accounting import numerics
from tff_quant.mechanisms import ddgauss
from tests.mechanisms import mechanism_checks

PARAMS = [dict(clip=1.0, num_levels=256, steps=4, noise_std=3.0),
          dict(clip=0.02, num_levels=1024, steps=60, noise_std=0.7)]
ORDERS = [2, 4, 8, 16, 32]


def test_single_client_is_the_gaussian_at_integer_shifts_and_orders():
  # D_α(N_Z(0,σ²) || N_Z(Δ,σ²)) = αΔ²/(2σ²) exactly for integer α and Δ.
  mech = ddgauss.DistributedDiscreteGaussian(clip=1.0, num_levels=2**14, steps=4,
                                             noise_std=5.0)
  exact = accounting.per_round_rdp(mech, 1, 1, ORDERS)
  for a in ORDERS:
    # At or above, by at most the laws' proved error (`numerics`; η ~ 3u
    # times the largest (M/2)²/(2σ²) = 1.3e6: far-tail residues) and 1e-9.
    want = a * 8**2 / (2 * 25.0)
    assert want * (1 - 1e-12) <= exact[a] <= want * (1 + 1e-9) + 2 * (
        numerics.rdp_allowance(mech, 1, a))


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
    # The proved value adds the laws' proved error (η carried twice at most:
    # n·η_w in W_n by `sum_divergences`, and `numerics.rdp_allowance`), a
    # few 1e-9 relative here, where the exact value is near KLS21's bound.
    allowance = 2 * numerics.rdp_allowance(mech, n, a)
    assert 0 < allowance < 1e-8
    assert exact[a] <= bounds.ddgauss_rdp(a, mech, n) * (1 + 1e-9) + allowance
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
  """W_n's proved error (`noise_sum_log_error`, n·η_w included) holds at
  every residue against the exact n-fold circular convolution (mpmath) of
  the exact one-client wrapped law (the discrete Gaussian on all integers,
  wrapped), and `sum_divergences` stays above the exact shift divergences
  of that W_n."""
  import mpmath  # pylint: disable=g-import-not-at-top
  mpmath.mp.prec = 160
  mech = ddgauss.DistributedDiscreteGaussian(clip=1.0, num_levels=64, steps=4,
                                             noise_std=2.0)
  n, m = 6, 64
  gauss = lambda z: mpmath.exp(-mpmath.mpf(z)**2 / 8)
  norm = mpmath.fsum(gauss(z) for z in range(-200, 201))
  one = [mpmath.fsum(gauss(k + j * m) for j in range(-3, 4)) / norm
         for k in range(m)]
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


# (M, σ): the served 16-bit cells (served_cells, fl_table_tuned, frontier),
# the frontier's 12-bit cells, and the edges of the noise range (a narrow
# law whose tails reach e^-(M/2)²/(2σ²) ~ e^-2e5, and σ = M/8).
_SIGMAS = [(65536, 315.33962538383986), (65536, 360.3129932171196),
           (65536, 566.3176964319264), (65536, 579.1594605020958),
           (65536, 777.6181), (4096, 24.672), (4096, 50.5), (4096, 3.0),
           (4096, 512.0)]


def _exact_log_norm(mpmath, sigma):
  """log Σ_(all integers w) e^(-w²/(2σ²)) at the working precision (terms
  below e^-110 of the first left out: below 40 digits)."""
  s2 = 2 * mpmath.mpf(sigma)**2
  top = int(mpmath.sqrt(110 * s2)) + 2
  return mpmath.log(1 + 2 * mpmath.fsum(mpmath.exp(-mpmath.mpf(w)**2 / s2)
                                        for w in range(1, top)))


@pytest.mark.parametrize('m,sigma', _SIGMAS)
def test_noise_log_pmf_is_within_its_proved_error_of_40_digits(m, sigma):
  """Issue 61, item 1 (ddgauss): `noise_log_pmf_error` bounds the computed
  log-pmf's distance to the discrete Gaussian on all integers (40-digit
  mpmath) at 330 points of the window (its ends and the mode included),
  and the bound is about 3u·z²/(2σ²) (2u the quotient, u the
  subtraction): under 1e-14 at the mode."""
  import mpmath  # pylint: disable=g-import-not-at-top
  mech = ddgauss.DistributedDiscreteGaussian(1.0, m, 4, sigma)
  half = int(math.ceil(2.5 * m))
  z = np.unique(np.concatenate([np.arange(-12, 13), [half, -half],
                                np.linspace(-half, half, 301).round()]))
  z = z.astype(np.int64)
  got, bound = mech.noise_log_pmf(z), mech.noise_log_pmf_error(z)
  with mpmath.workdps(40):
    s2, log_norm = 2 * mpmath.mpf(sigma)**2, _exact_log_norm(mpmath, sigma)
    for k, g, b in zip(z.tolist(), got, bound):
      exact = -mpmath.mpf(k)**2 / s2 - log_norm
      assert abs(mpmath.mpf(float(g)) - exact) <= b, (k, g, b)
  assert bound[z == 0][0] < 1e-14
  q = z.astype(np.float64)**2 / (2 * sigma**2)
  assert np.all(bound <= 3.1 * 2.0**-53 * q + 1e-13)


@pytest.mark.parametrize('m,sigma', [s for s in _SIGMAS if s[0] == 4096] +
                         [(65536, 579.1594605020958)])
def test_wrapped_law_and_pmf_are_within_their_proved_error(m, sigma):
  """`wrapped_noise_error` (η_w) bounds the one-client wrapped law against
  the exact residues (all aliases, 40 digits; every residue at M = 4,096,
  the ends, the middle and 60 more at the served M = 65,536), and, at M =
  4,096, `log_pmf_error` (η) bounds the law at inputs on and off the
  lattice (the two-point mixture over the rounding, at the rounding
  fraction as computed), within 1e3 of the worst error measured
  (`mechanism_checks.assert_log_pmf_within_error`); η_w <= η."""
  import mpmath  # pylint: disable=g-import-not-at-top
  steps = 4
  mech = ddgauss.DistributedDiscreteGaussian(1.0, m, steps, sigma)
  eta_w = mech.wrapped_noise_error()
  assert 0 < eta_w <= mech.log_pmf_error
  w = mech.noise_sum_log_pmf(1)
  with mpmath.workdps(40):
    s2, log_norm = 2 * mpmath.mpf(sigma)**2, _exact_log_norm(mpmath, sigma)

    def residue(k):   # log P(Z ≡ k mod M), aliases |j| <= 3 (the rest < e^-250)
      terms = [-mpmath.mpf(k + j * m)**2 / s2 for j in range(-3, 4)]
      top = max(terms)
      return (top + mpmath.log(mpmath.fsum(mpmath.exp(t - top) for t in terms))
              - log_norm)
    if m > 4096:
      ks = np.unique(np.concatenate([np.arange(8), m - 1 - np.arange(8),
                                     m // 2 + np.arange(-4, 4),
                                     np.linspace(0, m - 1, 60).round()]))
    else:
      ks = np.arange(m)
    exact = {int(k): residue(int(k)) for k in ks}
    for k, v in exact.items():
      assert abs(mpmath.mpf(float(w[k])) - v) <= eta_w, k
    if m > 4096:
      return

    def exact_log_pmf(x):
      j, f = mech._rounding(x)   # the law at the fraction as computed
      f = mpmath.mpf(f)
      return [mpmath.log((1 - f) * mpmath.exp(exact[(k - j) % m]) +
                         f * mpmath.exp(exact[(k - j - 1) % m]))
              for k in range(m)]
    mechanism_checks.assert_log_pmf_within_error(
        mech, exact_log_pmf, [0.3 / steps, 1.7 / steps, -2.25 / steps, 1.0,
                              -1.0])
