"""Checks every mechanism must pass; each mechanism's test module calls them."""

import numpy as np
from scipy import stats
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


# Clips that float32 rounds UP (float32(c) > c): a float32 clip let the
# samplers see an input past the range (docs/mechanisms.md, "Inside the
# support"). 0.0331 is the issue's; 1e-3 and 1/7 round up as far (by
# 4.8e-8 and 4.5e-8 relative, 2^-24 = 6e-8 at most); 1/3, 0.3, 0.1, 2.7 are
# common clips that do too.
EDGE_CLIPS = (0.0331, 1e-3, 1 / 7, 1 / 3, 0.3, 0.1, 2.7)


def edge_inputs(c: float):
  """float32 inputs at and just past both edges: ±float32(c) and
  ±float32(c)·(1 + 1e-6), as float32 values (Python floats)."""
  top = np.float32(c)
  past = np.float32(float(top) * (1 + 1e-6))
  return [float(top), -float(top), float(past), -float(past)]


def sample_inputs(mech, inputs, draws, seed) -> np.ndarray:
  """[len(inputs), draws] levels: one `encode` call over every input."""
  values = np.repeat(np.asarray(inputs, np.float32), draws)
  levels = mech.encode(tf.constant(values), tf.constant(seed, tf.int64)).numpy()
  return levels.reshape(len(inputs), draws)


def assert_levels_in_support(mech, x: float, levels: np.ndarray,
                             log_p: np.ndarray = None):
  """Every level in [0, L-1] with log_pmf(x) > -inf (x is clipped by
  `log_pmf`, as `sanitize` clips it for the sampler); `log_p`: log_pmf(x)
  if the caller has it."""
  outside = (levels < 0) | (levels >= mech.num_levels)
  assert not outside.any(), (
      f'{mech} at x={x!r}: {int(outside.sum())} of {levels.size} draws outside '
      f'[0, {mech.num_levels - 1}], e.g. {levels[outside][:5]}')
  log_p = mech.log_pmf(x) if log_p is None else log_p
  impossible = ~np.isfinite(log_p)[levels]
  assert not impossible.any(), (
      f'{mech} at x={x!r}: {int(impossible.sum())} of {levels.size} draws at '
      f'levels the pmf calls impossible, e.g. {np.unique(levels[impossible])[:5]}')


def assert_counts_follow_pmf(counts: np.ndarray, p: np.ndarray, what: str,
                             false_alarm: float = 1e-6):
  """Each level's count inside the central 1 - false_alarm/L interval of
  its exact Binomial(N, p_i) law (N = counts.sum()): by the union bound the
  check fails with probability <= false_alarm when the sampler's law is p.

  A level whose N·p is far below false_alarm/L must not be drawn at all:
  this is what catches a level that float arithmetic makes possible where
  the pmf says (practically) impossible.

  Args:
    counts: [L] draws per level.
    p: [L] the pmf.
    what: the mechanism and input, for the message.
    false_alarm: the check's false-alarm probability.
  """
  num = int(counts.sum())
  q = false_alarm / (2 * counts.size)
  p = np.clip(p, 0.0, 1.0)
  low = stats.binom.ppf(q, num, p)    # P(X < low) <= q
  high = stats.binom.isf(q, num, p)   # P(X > high) <= q
  bad = (counts < low) | (counts > high)
  if bad.any():
    i = np.flatnonzero(bad)[:5]
    raise AssertionError(
        f'{what}: levels {i} drawn {counts[i]} times of {num}, outside '
        f'[{low[i]}, {high[i]}] (pmf {p[i]}; false alarm {false_alarm:g})')


def assert_edges_follow_pmf(mech, draws: int, seed=(61, 2),
                            false_alarm: float = 1e-6):
  """At x = ±float32(c) and just past (`edge_inputs`, c the input bound):
  every draw in the pmf's support at the clipped input, and the histogram
  of the draws at each clipped input within `assert_counts_follow_pmf`'s
  bounds of the pmf there (where float32 rounds c up, the edge and the
  input past it are pooled: both clip to ±c).

  Args:
    mech: the mechanism.
    draws: draws per input (4 inputs).
    seed: the encode seed.
    false_alarm: per clipped input, for `assert_counts_follow_pmf`.
  """
  inputs = edge_inputs(mech.input_bound)
  assert_edge_levels_follow_pmf(
      mech, inputs, sample_inputs(mech, inputs, draws, seed), false_alarm)


def assert_edge_levels_follow_pmf(mech, inputs, levels: np.ndarray,
                                  false_alarm: float = 1e-6):
  """`assert_edges_follow_pmf` on drawn levels: row i of `levels` drawn at
  inputs[i] (`edge_inputs`).

  Args:
    mech: the mechanism.
    inputs: the float32 inputs, each past or at ±float32(c).
    levels: [len(inputs), draws] levels.
    false_alarm: per clipped input, for `assert_counts_follow_pmf`.
  """
  # Inputs the pmf clips to one value (`clip_input`: ±c for float32(c) > c
  # and past it; float32(c) itself where it rounds c down) share its law.
  groups = {}
  for x, row in zip(inputs, levels):
    groups.setdefault(mech.clip_input(x), []).append(row)
  for x, rows in groups.items():
    log_p = mech.log_pmf(x)
    for row in rows:
      assert_levels_in_support(mech, x, row, log_p)
    counts = np.bincount(np.concatenate(rows), minlength=mech.num_levels)
    assert_counts_follow_pmf(counts, np.exp(log_p), f'{mech} at x={x!r}',
                             false_alarm)


def exact_lattice_log_pmf(mech, x: float, exact_log_pmf_at, digits: int):
  """The exact log-law of input x as the code computes it: `exact_log_pmf_at`
  (high-precision log-pmf of an input, mpmath values) at x clipped, or, with
  an input lattice, the two-point mixture at the float lattice points and
  the float weight the code (and the sampler, `base.lattice_round`) uses.

  Args:
    mech: a mechanism with `clip_input`, `lattice`, `input_bound`,
      `lattice_step`.
    x: the input.
    exact_log_pmf_at: float input -> [levels] mpmath log-probabilities.
    digits: mpmath's working precision for the mixture.

  Returns:
    [levels] mpmath log-probabilities.
  """
  import mpmath   # pylint: disable=g-import-not-at-top
  x = mech.clip_input(x)
  if not mech.lattice:
    return exact_log_pmf_at(x)
  h = 2.0 * mech.input_bound / (mech.lattice - 1)
  t = (x + mech.input_bound) / h
  i = min(max(int(np.floor(t)), 0), mech.lattice - 2)
  w = min(max(t - i, 0.0), 1.0)
  at = lambda k: exact_log_pmf_at(-mech.input_bound + k * mech.lattice_step)
  with mpmath.workdps(digits):
    w = mpmath.mpf(w)
    return [mpmath.log((1 - w) * mpmath.exp(a) + w * mpmath.exp(b))
            for a, b in zip(at(i), at(i + 1))]


def assert_log_pmf_within_error(mech, exact_log_pmf, inputs,
                                tightness: float = 1e3):
  """`mech.log_pmf_error` (η) bounds |computed − exact| of the log-pmf at
  every input, and is within `tightness` of the largest error measured (a
  check that the proof is not vacuous; skipped where nothing errs).

  Args:
    mech: the mechanism.
    exact_log_pmf: input -> [levels] high-precision log-probabilities.
    inputs: the inputs tried.
    tightness: the largest allowed η over the worst error measured.
  """
  eta = mech.log_pmf_error
  worst = 0.0
  for x in inputs:
    got = mech.log_pmf(x)
    for g, e in zip(got, exact_log_pmf(x)):
      assert abs(g - float(e)) <= eta, (x, g - float(e), eta)
      worst = max(worst, abs(g - float(e)))
  assert worst == 0 or eta <= tightness * max(worst, 1e-15)
