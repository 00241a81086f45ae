import itertools
import numpy as np
import pytest
import tensorflow as tf
from scipy import special

from tff_quant.accounting import divergence
from tff_quant.mechanisms import ddgauss
from tff_quant.mechanisms import modular
from tff_quant.mechanisms import skellam

CLASSES = [ddgauss.DistributedDiscreteGaussian, skellam.DistributedSkellam]


def _sum_mod(mech, inputs):
  """Exact log-law of the modular secure sum by direct circular convolution."""
  out = np.full(mech.m, -np.inf)
  out[0] = 0.0
  k = np.arange(mech.m)
  for x in inputs:
    lp = mech.log_pmf(x)
    out = special.logsumexp(out[None, :] + lp[(k[:, None] - k[None, :]) % mech.m],
                            axis=1)
  return out


@pytest.mark.parametrize('cls', CLASSES)
def test_divergences_hold_for_every_input_of_the_others(cls):
  # Brute force over targets and the other client's inputs on a grid: never
  # above the translation-invariant value, and equal at the vertex pairs.
  mech = cls(clip=1.0, num_levels=64, steps=2, noise_std=1.2)
  grid = np.linspace(-1, 1, 9)
  t = 0.75
  own = mech.sum_divergences([2, 8], 2, [t, 2.0])
  worst = {2: 0.0, 8: 0.0}
  for x, other in itertools.product(grid, grid):
    for x2 in (x - t, x + t):
      if abs(x2) > 1:
        continue
      lp, lq = _sum_mod(mech, [x, other]), _sum_mod(mech, [x2, other])
      for a in (2, 8):
        worst[a] = max(worst[a], divergence.renyi_divergence(lp, lq, a))
  for a in (2, 8):
    assert worst[a] <= own[a][0] * (1 + 1e-6)
    assert worst[a] >= own[a][0] * (1 - 1e-6)   # attained at a vertex
    ends = divergence.renyi_divergence(_sum_mod(mech, [1.0, 0.5]),
                                       _sum_mod(mech, [-1.0, 0.5]), a)
    assert ends == pytest.approx(own[a][1], rel=1e-6)


def test_decode_centres_the_residue():
  mech = skellam.DistributedSkellam(clip=1.0, num_levels=256, steps=8, noise_std=2.0)
  got = mech.decode(tf.constant([3, 253, 128, 256 + 5]), 4).numpy()
  np.testing.assert_allclose(got, np.array([3, -3, -128, 5]) / 8.0)


def test_wrap_sums_aliases():
  log_p = np.log(np.array([0.1, 0.2, 0.3, 0.4]))
  # values -1, 0, 1, 2 mod 3 -> residues 2, 0, 1, 2
  np.testing.assert_allclose(np.exp(modular.wrap(log_p, -1, 3)), [0.2, 0.3, 0.5])


@pytest.mark.parametrize('cls', CLASSES)
def test_bad_parameters_name_the_range(cls):
  with pytest.raises(ValueError, match='steps'):
    cls(clip=1.0, num_levels=64, steps=16, noise_std=1.0)
  with pytest.raises(ValueError, match='noise_std'):
    cls(clip=1.0, num_levels=64, steps=2, noise_std=9.0)
  with pytest.raises(ValueError, match='clip'):
    cls(clip=-1.0, num_levels=64, steps=2, noise_std=1.0)


def test_unresolved_noise_law_is_out_of_reach_not_a_crash():
  """NaN entries (unresolved) cannot be bounded there: one clear error, which
  calibration reads as 'out of reach' for that setting."""
  log_w = np.log(np.full(8, 1 / 8))
  log_w[3] = np.nan
  with pytest.raises(modular.UnresolvableError, match='unresolved'):
    modular._shift_divergences(log_w, 2, [2.0])


@pytest.mark.parametrize('noise_fraction, clients', [
    (0.004, 60), (0.02, 30), (0.003, 8), (0.12, 40)])
def test_noise_sum_with_far_tails_unresolved_equals_the_fully_resolved(
    noise_fraction, clients):
  """`_wrapped_above` leaves the integer sum's far tails unresolved; where it
  answers, the wrapped law is the fully resolved one to float precision, and
  where their bounds could matter (0.12: heavy wrapping) it declines."""
  from tff_quant.common import laws  # pylint: disable=g-import-not-at-top
  m = 4096
  mech = ddgauss.DistributedDiscreteGaussian(1.0, m, 16, noise_fraction * m)
  centred = np.roll(mech._wrapped_noise(), m // 2)
  first = -clients * (m // 2)
  full = modular.wrap(laws.sum_log_pmf([(centred, clients)]), first, m)
  np.testing.assert_allclose(mech.noise_sum_log_pmf(clients), full,
                             rtol=0, atol=1e-12)
  above = mech._wrapped_above(centred, clients, first)
  if above is not None:
    np.testing.assert_allclose(above, full, rtol=0, atol=1e-12)


def test_shift_divergences_equal_scipys_logsumexp_bit_for_bit():
  """The blocked, in-place sums give the bits of scipy's per-row logsumexp
  (blocks of several shifts and a partial last block)."""
  mech = ddgauss.DistributedDiscreteGaussian(0.1, 512, 8, 9.0)
  log_w = mech.noise_sum_log_pmf(5)
  orders = [1.0, 1.5, 2.0, 8.0, 64.0, np.inf]
  got = modular._shift_divergences(log_w, 40, orders)
  for j in range(41):
    rolled = np.roll(log_w, j)
    diff = log_w - rolled
    for a in orders[2:-1]:
      want = special.logsumexp(log_w + (a - 1) * diff) / (a - 1)
      assert got[a][j] == max(want, 0.0)
    assert got[np.inf][j] == max(diff.max(), 0.0)


def test_least_resolvable_noise_is_the_edge_of_the_exact_sum():
  """Just above it the noise-sum law is computed; just below, refused as
  out of reach. Skellam's closed form has no such edge."""
  cls = ddgauss.DistributedDiscreteGaussian
  edge = cls.least_resolvable_noise(512)
  assert 0 < edge < 512 / 8
  cls(0.1, 512, 4, edge * (1 + 1e-6)).noise_sum_log_pmf(3)
  with pytest.raises(modular.UnresolvableError, match='not resolvable'):
    cls(0.1, 512, 4, edge * (1 - 1e-6)).noise_sum_log_pmf(3)
  assert skellam.DistributedSkellam.least_resolvable_noise(512) == 0.0


@pytest.mark.parametrize('cls', CLASSES)
def test_gaussian_matched_noise_is_the_gaussians_in_integer_steps(cls):
  """noise_std·γ = σ (γ = c/r), as a fraction of M; raised to the least
  resolvable noise; None past the tunable's range."""
  params = dict(num_levels=2**12, steps=64, noise_fraction=1 / 128)
  c = 0.05
  fraction = cls.gaussian_matched(0.3, c, params)
  assert fraction * 2**12 * c / 64 == pytest.approx(0.3, rel=1e-12)
  low = cls.gaussian_matched(1e-6, c, params)
  assert low * 2**12 == pytest.approx(
      max(1e-6 * 64 / c, cls.least_resolvable_noise(2**12)), rel=1e-12)
  assert cls.gaussian_matched(1e3, c, params) is None


def test_sum_input_error_bounds_perturbed_laws_and_beats_n_times_the_max():
  """`sum_input_error`: a one-client law w̃ perturbed from w (a wrapped
  discrete Gaussian, M = 16) by e^(±e_r), e_r = 1e-7 + 1e-7·|log w_r| with
  random signs (large enough to dwarf rounding), then n = 5 fold circular
  convolutions of both in 50-digit mpmath: every residue within the bound,
  which is at most half of n·max e_r (the uniform alternative)."""
  import mpmath  # pylint: disable=g-import-not-at-top
  m, n = 16, 5
  mech = ddgauss.DistributedDiscreteGaussian(1.0, m, 1, 1.5)
  log_w = mech.noise_sum_log_pmf(1)
  errors = 1e-7 + 1e-7 * np.abs(log_w)
  signs = np.random.default_rng(0).choice([-1.0, 1.0], m)
  with mpmath.workdps(50):
    exact = [mpmath.exp(mpmath.mpf(float(v))) for v in log_w]
    moved = [mpmath.exp(mpmath.mpf(float(v)) + s * mpmath.mpf(float(e)))
             for v, s, e in zip(log_w, signs, errors)]

    def power(law):
      out = law
      for _ in range(n - 1):
        out = [mpmath.fsum(out[i] * law[(k - i) % m] for i in range(m))
               for k in range(m)]
      return out
    w_n, moved_n = power(exact), power(moved)
    log_moved = np.array([float(mpmath.log(v)) for v in moved_n])
    bound = modular.sum_input_error(np.log(np.array([float(v) for v in moved])),
                                    errors, n, log_moved)
    for k in range(m):
      assert abs(mpmath.log(moved_n[k]) - mpmath.log(w_n[k])) <= bound[k], k
  assert np.max(bound) <= 0.5 * n * np.max(errors)
