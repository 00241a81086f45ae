"""The contract every registered mechanism meets, checked over `registry()`.

A new mechanism module is covered here without any edit: pmf validity, the
sampler against the exact pmf (Monte Carlo, 5σ per level; at the defaults and at
the PARAMS its own test module lists), unbiasedness where declared, the exact D∞ against a fine-grid brute force, seeding, sanitizing,
and its declared tunables rejecting bad values with their name and range; and
every sampler inside its pmf's support at the clip's edges, where float32
rounds c up (1e7 draws, and 200 random clips, on the sets each module's test
lists as `edge_mechanisms`), with the edge's law the pmf's there.
"""

import importlib
import math

import numpy as np
import pytest
import tensorflow as tf

from tests.mechanisms import mechanism_checks as checks
from tff_quant import mechanisms
from tff_quant.accounting import divergence
from tff_quant.mechanisms import base

REGISTRY = mechanisms.registry()
C_INF = (1.0, 0.02)


CASES = [pytest.param(name, c, params, id=f'{name}-c{c}-{params}')
         for name, params in mechanisms.variants() for c in C_INF]


def specific_parameter_sets():
  """(name, constructor kwargs) from each mechanism's own test module's PARAMS
  (tests/mechanisms/<module>_test.py): the sets that exercise its special paths."""
  out = []
  for name, cls in REGISTRY.items():
    module = f'tests.mechanisms.{cls.__module__.rsplit(".", 1)[-1]}_test'
    try:
      params = importlib.import_module(module).PARAMS
    except (ImportError, AttributeError):
      continue
    out += [pytest.param(name, p, id=f'{name}-{p}') for p in params]
  return out


def edge_mechanisms(name, c):
  """[mechanism at clip c]: the registry's defaults, then the sets the
  mechanism's own test module lists as `edge_mechanisms(c)` (those where a
  float32 clip left the support)."""
  cls = REGISTRY[name]
  module = f'tests.mechanisms.{cls.__module__.rsplit(".", 1)[-1]}_test'
  try:
    listed = importlib.import_module(module).edge_mechanisms(c)
  except (ImportError, AttributeError):
    listed = []
  return [cls.for_coordinate_bound(c)] + list(listed)


def test_registry_lists_every_paper_mechanism():
  assert {'rqm', 'pbm', 'bq', 'qmgeo', 'quantized_gaussian',
          'randomized_projection'} <= set(REGISTRY)
  for name, cls in REGISTRY.items():
    assert cls.name == name
    assert cls.CALIBRATED, f'{name} declares no calibrated parameter'
    assert cls.tunable(cls.CALIBRATED[-1]).more_private in ('higher', 'lower')


def _check_pmf_against_sampler(mech):
  for x in checks.standard_inputs(mech):
    checks.assert_pmf_valid(mech, x)
    checks.assert_histogram_matches_pmf(mech, x)
    if mech.unbiased:
      checks.assert_pmf_mean_is_input(mech, x)


@pytest.mark.parametrize('name, c, params', CASES)
def test_pmf_valid_and_matches_sampler(name, c, params):
  mech = mechanisms.build(name, c, **params)
  assert math.isclose(mech.input_bound, c, rel_tol=1e-12) or mech.input_bound >= c
  _check_pmf_against_sampler(mech)


@pytest.mark.parametrize('name, params', specific_parameter_sets())
def test_pmf_valid_and_matches_sampler_on_each_modules_parameter_sets(name, params):
  _check_pmf_against_sampler(REGISTRY[name](**params))


@pytest.mark.parametrize('name', sorted(REGISTRY))
def test_decode_unbiased_where_declared(name):
  mech = mechanisms.build(name, 1.0)
  if not mech.unbiased:
    pytest.skip(f'{name} does not declare unbiasedness')
  for x in (-1.0, 0.3, 1.0):
    checks.assert_decode_unbiased(mech, x)


@pytest.mark.parametrize('name, c, params', CASES)
def test_epsilon_infinity_is_at_least_the_fine_grid_sup(name, c, params):
  mech = mechanisms.build(name, c, **params)
  grid = np.linspace(-mech.input_bound, mech.input_bound, 401)
  rows = np.stack([mech.log_pmf(x) for x in grid])
  hi, lo = rows.max(axis=0), rows.min(axis=0)
  possible = np.isfinite(hi)
  brute = (math.inf if np.any(possible & ~np.isfinite(lo))
           else float(np.max(hi[possible] - lo[possible])))
  exact = divergence.epsilon_infinity(mech)
  if math.isinf(brute):
    assert math.isinf(exact)
  else:
    assert exact >= brute - 1e-9 * max(1.0, brute), (exact, brute)


@pytest.mark.parametrize('name, c, params', CASES + [
    ('pbm', 1.0, dict(num_levels=8, theta=0.5)),
    # Nearest ½ that PBM accepts (closer, its sampler would round p to 0
    # and 1: refused, pbm_test).
    ('pbm', 1.0, dict(num_levels=4, theta=0.5 - 1e-14))])
def test_positive_everywhere_only_where_no_level_is_impossible(name, c,
                                                               params):
  """Where a mechanism says every level is possible at every input, no law
  at its critical inputs, their midpoints or a fine grid has a -inf entry
  (and `impossible_mass` is 0, as the law-by-law computation finds)."""
  from tff_quant.accounting import divergence  # pylint: disable=g-import-not-at-top
  mech = mechanisms.get(name).for_coordinate_bound(c, **params)
  if not mech.positive_everywhere():
    return
  xs = np.unique(mech.critical_inputs())
  xs = np.concatenate([xs, 0.5 * (xs[1:] + xs[:-1]),
                       np.linspace(-c, c, 41)])
  for x in xs:
    assert np.all(np.isfinite(mech.log_pmf(x))), (x, mech)
  assert divergence.impossible_mass(mech)[0] == 0.0


@pytest.mark.parametrize('name, c, params', CASES)
def test_seeding_and_sanitizing(name, c, params):
  mech = mechanisms.build(name, c, **params)
  checks.assert_seeding(mech)
  checks.assert_sanitizes(mech)


def bad_values(t):
  """(value, error type) pairs outside the tunable's declared type or range."""
  if t.kind is bool:
    return [(1, TypeError), ('yes', TypeError)]
  out = [('a', TypeError), (None, TypeError)]
  if t.kind is int:
    out.append((2.5, TypeError))
  else:
    out.append((float('nan'), ValueError))
  if t.low is not None:
    out.append((t.low if t.low_open else t.low - 1, ValueError))
  if t.high is not None:
    out.append((t.high if t.high_open else t.high + 1, ValueError))
  return out


@pytest.mark.parametrize('name, tunable, value, error', [
    pytest.param(name, t.name, v, e, id=f'{name}-{t.name}-{v!r}')
    for name, cls in REGISTRY.items() for t in cls.TUNABLES
    for v, e in bad_values(t)])
def test_bad_parameter_is_rejected_with_its_name_and_range(name, tunable, value,
                                                           error):
  cls = REGISTRY[name]
  with pytest.raises(error, match=f'`{tunable}`') as info:
    cls.for_coordinate_bound(1.0, **{tunable: value})
  assert cls.tunable(tunable).allowed() in str(info.value)


@pytest.mark.parametrize('name', sorted(REGISTRY))
def test_unknown_parameter_and_bad_flag_text_are_rejected(name):
  cls = REGISTRY[name]
  with pytest.raises(ValueError, match='no parameter'):
    cls.for_coordinate_bound(1.0, not_a_parameter=1)
  with pytest.raises(ValueError, match='key=value'):
    cls.parse_params('justtext')
  first = cls.TUNABLES[0]
  assert cls.parse_params(f'{first.name}={first.default}') == {
      first.name: first.default}


@pytest.mark.parametrize('name', sorted(REGISTRY))
def test_accounting_hooks_reject_bad_arguments_by_name(name):
  mech = REGISTRY[name].for_coordinate_bound(1.0)
  for bad in (0, -3):
    with pytest.raises(ValueError, match=r'`num_clients` must be in \[1, inf\)'):
      mech.sum_reduction(bad)
  with pytest.raises(ValueError, match=r'`orders` must be in \[1, inf\]'):
    mech.local_divergences([0.5], [0.1])
  with pytest.raises(ValueError, match='`distances`'):
    mech.local_divergences([2.0], [-0.1])
  bound = mech.local_divergences([1, 2.0, math.inf], [0.0, 0.5])
  assert bound is None or all(v[0] == 0 and v[1] > 0 for v in bound.values())


# --- inside the support (docs/mechanisms.md, "Inside the support") ----------
def test_edge_clips_round_up_in_float32():
  for c in checks.EDGE_CLIPS:
    assert float(np.float32(c)) > c, c


@pytest.mark.parametrize('dtype', [tf.float32, tf.float64])
def test_round_within_never_leaves_its_range(dtype):
  eps = float(np.finfo(dtype.as_numpy_dtype).eps)
  low, high = -3, 1024
  # Just past each end (where an unclamped rounding steps out), the ends,
  # and integers inside.
  points = [high * (1 + 4 * eps), high + 0.3, low * (1 + 4 * eps), low - 0.7,
            high, low, 7.0]
  draws = 20_000
  t = tf.constant(np.repeat(points, draws), dtype)
  seed = tf.constant([61, 1], tf.int64)
  unclamped = base.stochastic_round(t, seed).numpy().reshape(len(points), -1)
  assert unclamped[:4].max() > high or unclamped[:4].min() < low  # the data bites
  got = base.round_within(t, low, high, seed).numpy().reshape(len(points), -1)
  assert got.dtype == np.float64
  np.testing.assert_array_equal(got[[0, 1, 4]], high)
  np.testing.assert_array_equal(got[[2, 3, 5]], low)
  np.testing.assert_array_equal(got[6], 7.0)
  with pytest.raises(ValueError, match='`high`'):
    base.round_within(t, 2, 1, seed)


def test_round_within_is_unbiased_inside():
  """Mean of rounding t = 2.3 within [0, 5]: 2.3 within 5 standard deviations."""
  draws = 200_000
  got = base.round_within(tf.fill([draws], tf.constant(2.3, tf.float64)), 0, 5,
                          tf.constant([61, 2], tf.int64)).numpy()
  assert set(np.unique(got)) == {2.0, 3.0}
  assert abs(got.mean() - 2.3) <= 5 * math.sqrt(0.3 * 0.7 / draws)


@pytest.mark.parametrize('c', checks.EDGE_CLIPS)
def test_sanitize_is_clip_input_bit_for_bit(c):
  mech = REGISTRY['bq'](c, 1, 0)
  rng = np.random.default_rng(61)
  top = np.float32(c)
  x = np.concatenate([
      [top, -top, np.nextafter(top, np.float32(np.inf)), np.nan, np.inf, -np.inf,
       0.0], rng.uniform(-1.01 * c, 1.01 * c, 500)]).astype(np.float32)
  got = mech.sanitize(tf.constant(x)).numpy()
  assert got.dtype == np.float64
  np.testing.assert_array_equal(got, [mech.clip_input(v) for v in x])
  assert got[0] == c and got[1] == -c   # float32(c) > c is clipped to c
  # float64 inputs: one ulp past ±c, and just inside.
  x64 = np.array([np.nextafter(c, np.inf), -np.nextafter(c, np.inf),
                  np.nextafter(c, 0.0), c * (1 + 1e-9)])
  np.testing.assert_array_equal(mech.sanitize(tf.constant(x64)).numpy(),
                                [c, -c, np.nextafter(c, 0.0), c])


@pytest.mark.parametrize('jit', [False, True])
def test_compiled_rounding_points_are_within_half_the_snap_of_numpys(jit):
  """The samplers' rounding points as encode compiles them (graph mode, and
  XLA) against numpy's (the pmfs'): they differ (a division by a constant
  becomes a multiplication by its reciprocal), but by at most τ/2 of
  `base.snap_to_integers` (its argument needs the two within τ), and where
  numpy's point is an integer the snapped one is that integer."""
  rng = np.random.default_rng(62)
  c, s, r, big_r = 0.0331, 1023, 4099, 4097
  x = np.concatenate([rng.uniform(-c, c, 100_000),
                      c * np.arange(-s, s + 1) / s])     # on BQ's grid
  h, gamma = 2.0 * c / (big_r - 1), c / r
  forms = [(lambda v: v * float(s) / c, lambda v: v * s / c, s),        # BQ
           (lambda v: (v + 2 * c) / h, lambda v: (v + 2 * c) / h, big_r - 1),
           (lambda v: v / gamma, lambda v: v / gamma, r)]                # modular
  fn = tf.function(lambda v: [f(v) for f, _, _ in forms], jit_compile=jit)
  got = [t.numpy() for t in fn(tf.constant(x, tf.float64))]
  differ, off_integer = 0.0, 0
  for g, (_, numpy_form, extent) in zip(got, forms):
    want = numpy_form(x)
    tau = base.SNAP_ULPS * 2.0**-53 * extent
    differ = max(differ, float(np.mean(g != want)))
    assert np.max(np.abs(g - want)) <= tau / 2, (extent, np.max(np.abs(g - want)))
    snapped = base.snap_to_integers(tf.constant(g), extent).numpy()
    whole = want == np.round(want)
    off_integer += int(np.sum(g[whole] != want[whole]))
    np.testing.assert_array_equal(snapped[whole], want[whole])
  assert differ > 0.05   # the compiled arithmetic is not numpy's
  assert off_integer > 0   # ... also where numpy's point is an integer


@pytest.mark.parametrize('name', sorted(REGISTRY))
def test_ten_million_edge_draws_stay_in_the_support_and_follow_the_pmf(name):
  """1e7 draws at ±float32(c) and just past, c = 0.0331, on the set where the
  float32 sampler left its support (the module's first `edge_mechanisms`):
  none outside the pmf's support at ±c, and each edge's histogram the pmf's
  (exact binomial bounds per level, union-bounded false alarm 1e-6)."""
  sets = edge_mechanisms(name, 0.0331)
  mech = sets[1] if len(sets) > 1 else sets[0]
  checks.assert_edges_follow_pmf(mech, 2_500_000, seed=(61, 3))


@pytest.mark.parametrize('name', sorted(REGISTRY))
def test_edges_follow_the_pmf_at_random_clips(name):
  """Property: at 25 random clips per mechanism (200 in all, log-uniform in
  [1e-4, 1e2], fixed seed; about half round up in float32), each of its
  parameter sets in turn, 1,000 draws at each of ±float32(c) and just past:
  every draw in the support, each edge's histogram within its binomial
  bounds. Eager (`sanitize` + `_encode`): compiling 200 encoders is minutes."""
  rng = np.random.default_rng(sum(map(ord, name)))
  clips = np.exp(rng.uniform(math.log(1e-4), math.log(1e2), 25))
  for i, c in enumerate(clips):
    sets = edge_mechanisms(name, float(c))
    mech = sets[i % len(sets)]
    inputs = checks.edge_inputs(mech.input_bound)
    x = tf.constant(np.repeat(np.asarray(inputs, np.float32), 1000))
    levels = tf.cast(mech._encode(mech.sanitize(x), tf.constant([61, i], tf.int64)),  # pylint: disable=protected-access
                     tf.int32).numpy().reshape(len(inputs), -1)
    checks.assert_edge_levels_follow_pmf(mech, inputs, levels)

