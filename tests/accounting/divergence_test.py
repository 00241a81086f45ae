import itertools
import math

import numpy as np
import pytest

from tff_quant import mechanisms
from tff_quant.accounting import divergence as D

SMALL = [mechanisms.RQM(clip=1.0, delta=0.5, num_levels=4, q=0.4),
         mechanisms.PBM(clip=1.0, num_levels=4, theta=0.3),
         mechanisms.BQ(clip=1.0, s=1, m=2),
         mechanisms.QMGeo(clip=1.0, num_levels=4, p=0.5, full_support=True),
         mechanisms.QuantizedGaussian(clip=1.0, num_levels=4, sigma=0.5)]


def brute_force_sum_pmf(pmfs):
  """Enumerate every tuple of levels (triple sums for n = 3)."""
  size = sum(p.size - 1 for p in pmfs) + 1
  out = np.zeros(size)
  for levels in itertools.product(*[range(p.size) for p in pmfs]):
    out[sum(levels)] += math.prod(p[l] for p, l in zip(pmfs, levels))
  return out


def brute_force_divergence(p, q, alpha):
  """D_α(p‖q) of two pmfs; infinite where q lacks mass p has (BQ)."""
  m = p > 0
  with np.errstate(divide='ignore'):   # q = 0 under p > 0: D = inf, as meant
    if math.isinf(alpha):
      return np.max(np.log(p[m] / q[m]))
    if alpha == 1:
      return np.sum(p[m] * np.log(p[m] / q[m]))
    return math.log(np.sum(p[m]**alpha * q[m]**(1 - alpha))) / (alpha - 1)


@pytest.mark.parametrize('mech', SMALL, ids=lambda m: m.name)
@pytest.mark.parametrize('n', [1, 2, 3])
def test_matches_brute_force_for_every_mix(mech, n):
  c = mech.input_bound
  pp, pm = mech.pmf(c), mech.pmf(-c)
  for alpha in [1, 2, 5.5, math.inf]:
    res = D.renyi_divergence_of_sum(mech, alpha, n)
    for k in range(n):
      others = [pp] * k + [pm] * (n - 1 - k)
      p = brute_force_sum_pmf(others + [pp])
      q = brute_force_sum_pmf(others + [pm])
      assert res.per_mix[k] == pytest.approx(brute_force_divergence(p, q, alpha),
                                             rel=1e-9, abs=1e-12)
    assert res.value == max(res.per_mix.values())


def _log_convolve(a, b):
  out = np.full(a.size + b.size - 1, -np.inf)
  for i, v in enumerate(a):
    out[i:i + b.size] = np.logaddexp(out[i:i + b.size], v + b)
  return out


def test_sum_log_pmf_reaches_tilts_of_pmfs_spanning_1e5_efolds_per_level():
  """A quantized Gaussian with a tiny σ (calibration tries such values): its
  log-pmf falls by up to ~1e5 e-folds per level, so the far ends of the sum
  need |λ| ~ 1e5 (the saddle's reach doubles until it brackets the root)."""
  mech = mechanisms.QuantizedGaussian(clip=2.0, num_levels=16, sigma=0.002)
  plus, minus = D.end_log_pmfs(mech)
  assert np.min(np.diff(minus)) < -1e4
  for j in (0, 1, 20, 39):
    exact = np.zeros(1)
    for _ in range(j):
      exact = _log_convolve(exact, plus)
    for _ in range(40 - j):
      exact = _log_convolve(exact, minus)
    np.testing.assert_allclose(D.sum_log_pmf_at_extremes(mech, j, 40 - j)[0],
                               exact, rtol=1e-10, atol=1e-8)   # atol: log p ~ 0
  assert math.isfinite(D.renyi_divergence_of_sum(mech, 8.0, 40).value)


def test_tail_floor_bounds_terms_where_only_q_is_below_it():
  """A sum serves as P for one mix and Q for the next: where Q is left
  unresolved and P is not, the floor must still make the bounded terms
  negligible. PBM, 4,096 levels, 100 clients: the floored value equals the
  fully resolved one (it was 2.8x too large with the floor set for P alone)."""
  mech = mechanisms.PBM(1.0, 4096, 0.25)
  floored = D.renyi_divergence_of_sum(mech, 2.0, 100, 'balanced').value
  p = D.sum_log_pmf_at_extremes(mech, 50, 50)[0]
  q = D.sum_log_pmf_at_extremes(mech, 49, 51)[0]
  assert not np.isnan(p).any() and not np.isnan(q).any()
  assert floored == pytest.approx(D.renyi_divergence(p, q, 2.0), rel=1e-9)


def test_pbm_tails_stay_finite_where_float64_underflows():
  """n = 40, m = 16: the smallest probabilities are ~1e-323 or 0 in float64."""
  mech = mechanisms.PBM(clip=1.0, num_levels=16, theta=0.25)
  res = D.renyi_divergence_of_sum(mech, math.inf, 40)
  assert math.isfinite(res.value)
  # D∞ of the sum <= local D∞ (post-processing), attained at an extreme outcome.
  assert res.value <= D.renyi_divergence_of_sum(mech, math.inf, 1).value + 1e-9


def test_kl_and_dinf_limits_and_monotone_in_alpha():
  mech = mechanisms.RQM(clip=1.0, delta=1.0, num_levels=16, q=0.42)
  alphas = [1, 1.0001, 1.5, 2, 4, 16, 64, 1e4, math.inf]
  vals = [r.value for r in D.renyi_divergence_of_sum(mech, alphas, 5, others=[2])]
  assert vals[1] == pytest.approx(vals[0], rel=1e-3)
  assert vals[-2] == pytest.approx(vals[-1], rel=1e-2)
  assert all(a <= b + 1e-12 for a, b in zip(vals, vals[1:]))


def test_non_increasing_in_n_for_a_fixed_mix():
  mech = mechanisms.PBM(clip=1.0, num_levels=16, theta=0.25)
  vals = [D.renyi_divergence_of_sum(mech, 2, n, others=[0]).value
          for n in [1, 2, 5, 10, 20, 40]]
  assert all(b <= a + 1e-12 for a, b in zip(vals, vals[1:]))


def test_local_kl_against_monte_carlo():
  """KL(P_c || P_-c) = E_{i~P_c}[log P_c(i)/P_-c(i)], estimated from encode draws."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  mech = mechanisms.RQM(clip=1.0, delta=1.0, num_levels=16, q=0.42)
  lp, lq = mech.log_pmf(1.0), mech.log_pmf(-1.0)
  draws = mech.encode(tf.fill([200_000], 1.0), tf.constant([5, 6], tf.int64)).numpy()
  llr = (lp - lq)[draws]
  sd = llr.std() / math.sqrt(draws.size)
  exact = D.renyi_divergence_of_sum(mech, 1, 1).value
  assert abs(llr.mean() - exact) <= 5 * sd


def test_worst_mix_is_not_assumed_balanced():
  mech = mechanisms.RQM(clip=1.5, delta=1.5, num_levels=16, q=0.42)
  res = D.renyi_divergence_of_sum(mech, 2, 40)
  assert res.worst_num_plus != 19 and res.value > res.per_mix[19]


def test_epsilon_infinity():
  rqm = mechanisms.RQM(clip=1.0, delta=1.0, num_levels=16, q=0.42)
  # Over the whole range it is at least the value at the two ends.
  assert D.epsilon_infinity(rqm) >= D.renyi_divergence_of_sum(
      rqm, math.inf, 1).value - 1e-12
  assert math.isinf(D.epsilon_infinity(mechanisms.QMGeo(1.0, 8, 0.5)))
  assert math.isfinite(D.epsilon_infinity(mechanisms.QMGeo(1.0, 8, 0.5, True)))
  assert math.isinf(D.epsilon_infinity(mechanisms.PBM(1.0, 8, 0.5)))


def test_invalid_arguments_raise():
  mech = SMALL[0]
  with pytest.raises(ValueError, match='alpha'):
    D.renyi_divergence_of_sum(mech, 0.5, 3)
  with pytest.raises(ValueError, match='num_clients'):
    D.renyi_divergence_of_sum(mech, 2, 0)
  with pytest.raises(ValueError, match='others'):
    D.renyi_divergence_of_sum(mech, 2, 3, others='worst')
  with pytest.raises(ValueError, match='others'):
    D.renyi_divergence_of_sum(mech, 2, 3, others=[5])


def test_accounting_does_not_load_tensorflow():
  import subprocess, sys  # pylint: disable=g-import-not-at-top,multiple-imports
  code = ('import sys; from tff_quant import accounting, mechanisms; '
          'm = mechanisms.RQM(1.0, 1.0, 16, 0.42); '
          'accounting.training_guarantee(m, 2, 4, 100, 1e-5); '
          'print("tensorflow" in sys.modules)')
  out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                       timeout=300)
  assert out.returncode == 0, out.stderr[-1000:]
  assert out.stdout.strip() == 'False'


@pytest.mark.parametrize('mech', [
    mechanisms.PBM(clip=1.0, num_levels=8, theta=0.3),
    mechanisms.RQM(clip=1.0, delta=1.0, num_levels=8, q=0.5),
    mechanisms.RandomizedProjection(bound=0.3, bits=3, q=0.6, sigma=0.05,
                                    input_bound=0.4)], ids=lambda m: m.name)
def test_epsilon_infinity_local_is_an_upper_bound_that_converges(mech):
  delta = 0.2 * mech.input_bound
  # Brute force: pairs on a fine grid (a lower estimate of the supremum).
  xs = np.linspace(-mech.input_bound, mech.input_bound, 401)
  lp = np.stack([mech.log_pmf(x) for x in xs])
  step = xs[1] - xs[0]
  k = int(np.floor(delta / step + 1e-9))
  brute = max(np.max(lp[i] - lp[j]) for i in range(len(xs))
              for j in range(max(0, i - k), min(len(xs), i + k + 1)))
  coarse = D.epsilon_infinity_local(mech, delta, grid_size=101)
  fine = D.epsilon_infinity_local(mech, delta, grid_size=2001)
  assert coarse >= fine - 1e-12 >= brute - 1e-9
  assert fine - brute < 0.05 * brute + 1e-6
  # Full-range sensitivity recovers the global D∞.
  assert D.epsilon_infinity_local(mech, 2 * mech.input_bound) == pytest.approx(
      D.epsilon_infinity(mech), rel=1e-9)
  with pytest.raises(ValueError, match='sensitivity'):
    D.epsilon_infinity_local(mech, 0.0)


def test_support_mismatch_is_infinite_without_tail_bounds():
  # BQ's outputs at +C reach 2s values that -C cannot: D_α = inf for every α,
  # decided on the supports even where the tails could not be resolved (large m).
  small = mechanisms.BQ(1.0, 1, 8)
  brute = D.renyi_divergence_of_sum(small, [1.0, 2.0, math.inf], 3)
  assert all(math.isinf(r.value) for r in brute)
  big = mechanisms.BQ(0.0015, 6, 4079)
  assert math.isinf(D.renyi_divergence_of_sum(big, 2.0, 4).value)
  # Mechanisms with full support still go through the exact computation.
  pbm = mechanisms.PBM(1.0, 16, 0.25)
  assert math.isfinite(D.renyi_divergence_of_sum(pbm, 2.0, 4).value)


def test_impossible_mass_finds_disjoint_and_partial_supports():
  disjoint, x, x_other = D.impossible_mass(mechanisms.PBM(1.0, 8, 0.5))
  assert disjoint == pytest.approx(1.0) and {x, x_other} == {-1.0, 1.0}
  bq, _, _ = D.impossible_mass(mechanisms.BQ(1.0, 3, 8))
  # x = C sends 3 + Binomial(8, 1/2); x = -C sends at most 5: P(o >= 3) is lost.
  assert bq == pytest.approx(1 - sum(math.comb(8, k) for k in range(3)) / 256)
  assert D.impossible_mass(mechanisms.RQM(1.0, 1.0, 16, 0.42))[0] == 0.0
