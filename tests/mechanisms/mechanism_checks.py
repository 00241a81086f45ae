"""Checks every mechanism must pass; each mechanism's test module calls them."""

import numpy as np
import tensorflow as tf

NUM_DRAWS = 100_000
SIGMAS = 5.0


def as_float32(x: float) -> float:
  """The input value the TF sampler actually sees (float32 tensors)."""
  return float(np.float32(x))


def sample(mech, x: float, num: int = NUM_DRAWS, seed=(7, 11)) -> np.ndarray:
  values = tf.fill([num], tf.constant(x, tf.float32))
  return mech.encode(values, tf.constant(seed, tf.int64)).numpy()


def assert_histogram_matches_pmf(mech, x: float, seed=(7, 11)):
  """Monte Carlo: every level's frequency within 5 sigma of the exact pmf."""
  x = as_float32(x)
  p = mech.pmf(x)
  counts = np.bincount(sample(mech, x, seed=seed), minlength=mech.num_levels)
  assert counts.shape == (mech.num_levels,), 'sampled index outside [0, L-1]'
  freq = counts / NUM_DRAWS
  impossible = p == 0
  assert not counts[impossible].any(), (
      f'{mech} at x={x}: sampled levels {np.nonzero(counts * impossible)} '
      'that the pmf says are impossible')
  sd = np.sqrt(p * (1 - p) / NUM_DRAWS)
  # Allow one extra count per level for levels with tiny p (sd ~ 0).
  bound = SIGMAS * sd + 1.0 / NUM_DRAWS
  worst = np.argmax(np.abs(freq - p) - bound)
  assert np.all(np.abs(freq - p) <= bound), (
      f'{mech} at x={x}: level {worst} freq {freq[worst]:.5f} vs pmf '
      f'{p[worst]:.5f} (bound {bound[worst]:.5f})')


def assert_pmf_valid(mech, x: float):
  p = mech.pmf(x)
  log_p = mech.log_pmf(x)
  assert p.shape == (mech.num_levels,)
  assert np.all(p >= 0)
  assert abs(p.sum() - 1.0) < 1e-12, f'{mech} at {x}: sum {p.sum()!r}'
  assert not np.any(np.isnan(log_p)) and not np.any(log_p == np.inf)
  big = p > 1e-300
  np.testing.assert_allclose(log_p[big], np.log(p[big]), rtol=0, atol=1e-12)


def assert_decode_unbiased(mech, x: float, num_clients: int = 50):
  """decode(sum of n clients' levels, n) / n estimates x; tolerance from Var."""
  x = mech.clip_input(as_float32(x))
  p = mech.pmf(x)
  var = float(np.sum(p * mech.levels**2) - np.sum(p * mech.levels)**2)
  num_rounds = NUM_DRAWS // num_clients
  levels = sample(mech, x, num=num_rounds * num_clients).reshape(
      num_rounds, num_clients)
  est = mech.decode(tf.constant(levels.sum(axis=1)), num_clients).numpy()
  mean_est = float(np.mean(est / num_clients))
  sd = np.sqrt(var / (num_rounds * num_clients))
  assert abs(mean_est - x) <= SIGMAS * sd + 1e-6 * mech.input_bound, (
      f'{mech} at x={x}: mean {mean_est} vs {x}, sd {sd}')


def assert_pmf_mean_is_input(mech, x: float, atol=1e-9):
  """Exact unbiasedness: sum_i levels[i] P(i) == x."""
  x = mech.clip_input(as_float32(x))
  assert abs(float(np.dot(mech.levels, mech.pmf(x))) - x) <= atol * max(
      1.0, abs(mech.level_step) * mech.num_levels)


def assert_seeding(mech):
  values = tf.linspace(-mech.input_bound, mech.input_bound, 4096)
  a = mech.encode(values, tf.constant([1, 2], tf.int64)).numpy()
  b = mech.encode(values, tf.constant([1, 2], tf.int64)).numpy()
  c = mech.encode(values, tf.constant([1, 3], tf.int64)).numpy()
  np.testing.assert_array_equal(a, b)
  assert np.any(a != c), 'different seeds gave identical outputs'
  assert a.dtype == np.int32 and a.shape == (4096,)


def assert_sanitizes(mech):
  """Non-finite -> same law as 0 (same seed, same draw); outside -> clipped."""
  seed = tf.constant([3, 4], tf.int64)
  b = mech.input_bound
  bad = tf.constant([np.nan, np.inf, -np.inf, 10 * b, -10 * b], tf.float32)
  good = tf.constant([0.0, 0.0, 0.0, b, -b], tf.float32)
  np.testing.assert_array_equal(
      mech.encode(bad, seed).numpy(), mech.encode(good, seed).numpy())
  for x, y in [(np.nan, 0.0), (10 * b, b), (-10 * b, -b)]:
    np.testing.assert_array_equal(mech.log_pmf(x), mech.log_pmf(y))


def standard_inputs(mech):
  """Both range ends, 0, an interior point, and points exactly on a level."""
  b = mech.input_bound
  lv = mech.levels
  on_level = [v for v in lv if -b < v < b][:2]
  return [-b, b, 0.0, 0.37 * b, -0.81 * b] + on_level


def assert_local_bound_holds(mech, orders=(1.0, 2.0, 8.0, np.inf), seed=0):
  """`local_divergences` >= the exact D_α of the secure sum at random target
  pairs and random inputs of 0 or 2 others (data processing says for any)."""
  from tff_quant.accounting import divergence  # pylint: disable=g-import-not-at-top
  c = mech.input_bound
  rng = np.random.default_rng(seed)
  for _ in range(6):
    x, x_prime = rng.uniform(-c, c, 2)
    t = abs(x - x_prime)
    bound = mech.local_divergences(orders, [t])
    for num_others in (0, 2):
      rest = [(mech.log_pmf(o), 1) for o in rng.uniform(-c, c, num_others)]
      p = divergence.sum_log_pmf([(mech.log_pmf(x), 1)] + rest)
      q = divergence.sum_log_pmf([(mech.log_pmf(x_prime), 1)] + rest)
      for a in orders:
        exact = divergence.renyi_divergence(p, q, a)
        assert exact <= bound[a][0] * (1 + 1e-9) + 1e-12, (
            f'{mech}: D_{a} = {exact} at x={x}, x\'={x_prime}, {num_others} '
            f'others above the local bound {bound[a][0]}')
