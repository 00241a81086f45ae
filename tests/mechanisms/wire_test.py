"""The wire budget (`mechanisms.wire`): the proved wrap bound against exact
laws of the level sum (brute-force convolution) and Monte Carlo of the
mechanisms' own samplers, the centred decode in TensorFlow and through TFF's
SecureModularSumFactory, refusals, the error with wraps."""

import math

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_quant import aggregators
from tff_quant import mechanisms
from tff_quant.mechanisms import utility
from tff_quant.mechanisms import wire

# Small alphabets: the exact law of n clients' level sum is a few convolutions.
SMALL = {'pbm': dict(num_levels=4, theta=0.2), 'rqm': dict(num_levels=4),
         'bq': dict(s=1, m=6), 'qmgeo': dict(num_levels=4, full_support=True),
         'quantized_gaussian': dict(num_levels=4, noise_multiplier=0.5,
                                    lattice=5),
         'randomized_projection': dict(bits=2, noise_multiplier=0.5,
                                       lattice=5)}
# Wrap rate's Monte Carlo: coordinates (independent trials) and the z of its
# one-sided tolerance above the bound (P(false failure) <= 3e-7 per case).
TRIALS = 40_000
Z = 5.0


def _small(name):
  return mechanisms.build(name, 1.0, **SMALL[name])


def _sum_law(mech, inputs):
  """Exact law of the level sum of clients at `inputs` (convolution)."""
  law = np.ones(1)
  for x in inputs:
    law = np.convolve(law, mech.pmf(x))
  return np.maximum(law, 0.0)


def _exact_wraps(law, centre_halves, modulus):
  """(P(W != 0), E[W²]) of the centred decode of a sum with law `law`."""
  start = wire.window_start(centre_halves, modulus)
  s = np.arange(law.size)
  w = np.floor_divide(s - start, modulus)   # S = r + W·M, r in [start, start+M)
  return float(law[w != 0].sum()), float(np.dot(law, w.astype(float)**2))


def _configurations(mech, n):
  """Inputs of n clients: all at each of ±c, 0 and the critical inputs,
  and half at -c, half at +c (the worst of each tail lies among the first)."""
  c = mech.input_bound
  points = sorted(set([-c, 0.0, c] + [float(x) for x in mech.critical_inputs()]))
  configs = [[x] * n for x in points]
  configs.append([-c] * (n // 2) + [c] * (n - n // 2))
  return configs


def test_unreduced_bits_are_the_integer_secure_sums():
  for levels in (2, 3, 16, 255, 256, 2**16):
    for n in (1, 2, 7, 100, 1000):
      assert wire.unreduced_bits(levels, n) == aggregators.secure_sum_bits(
          n, levels)


@pytest.mark.parametrize('name', sorted(SMALL))
def test_wrap_bound_holds_against_the_exact_law(name):
  """The proved bounds on P(wrap) and E[W²] are >= their exact values for
  every input configuration, at every field narrower than the unreduced one,
  and both are 0 at the unreduced field."""
  mech = _small(name)
  n = 5
  halves = int(round(2 * wire.check_wire_mechanism(mech))) * n
  tails = wire.LevelSumTails(mech, n)
  top = wire.unreduced_bits(mech.num_levels, n)
  worst = 0.0
  for inputs in _configurations(mech, n):
    law = _sum_law(mech, inputs)
    for b in range(1, top + 1):
      exact_p, exact_w2 = _exact_wraps(law, halves, 2**b)
      bound_p = tails.wrap_probability(2**b)
      assert bound_p >= exact_p, (b, inputs)
      assert tails.wrap_second_moment(2**b) >= exact_w2, (b, inputs)
      if b < top and exact_p > 1e-6:
        worst = max(worst, exact_p / bound_p)
  assert tails.wrap_probability(2**top) == 0.0
  assert tails.wrap_second_moment(2**top) == 0.0
  assert worst > 0.01   # the bound is not vacuous where wraps are common


@pytest.mark.parametrize('name', ['pbm', 'rqm', 'bq'])
def test_wrap_bound_holds_at_a_narrow_signal_range(name):
  """With |x| <= a < c the bound still covers every input in [-a, a]."""
  mech = _small(name)
  n, a = 4, 0.3
  halves = int(round(2 * wire.check_wire_mechanism(mech))) * n
  tails = wire.LevelSumTails(mech, n, signal_bound=a)
  for x in np.linspace(-a, a, 13):
    law = _sum_law(mech, [x] * n)
    for b in range(1, wire.unreduced_bits(mech.num_levels, n)):
      assert tails.wrap_probability(2**b) >= _exact_wraps(law, halves, 2**b)[0]


@pytest.mark.parametrize('name', sorted(SMALL))
def test_the_bound_at_the_most_clients_covers_smaller_cohorts(name):
  """Nondecreasing in n, so a factory checks its largest cohort only."""
  mech = _small(name)
  for b in (3, 4, 5, 6):
    bounds = [wire.wrap_probability(mech, n, b) for n in range(1, 12)]
    assert all(x <= y for x, y in zip(bounds, bounds[1:])), (b, bounds)


def test_needed_bits_are_the_fewest_within_the_probability():
  mech = mechanisms.build('pbm', 1.0, num_levels=16, theta=0.1)
  n = 100
  need = wire.wire_bits_needed(mech, n)
  assert wire.wrap_probability(mech, n, need) <= utility.MODCLIP_PROB
  assert wire.wrap_probability(mech, n, need - 1) > utility.MODCLIP_PROB
  assert need < wire.unreduced_bits(16, n)   # the budget saves a bit here
  # A looser probability never needs more bits.
  assert wire.wire_bits_needed(mech, n, modclip_prob=1e-2) <= need


def test_needed_bits_never_exceed_the_unreduced_field():
  """At the unreduced field no sum wraps, so it is always enough."""
  mech = mechanisms.build('pbm', 1.0, num_levels=2, theta=0.5)
  for n in (1, 3, 10):
    assert wire.wire_bits_needed(mech, n, modclip_prob=1e-12) <= (
        wire.unreduced_bits(2, n))


def test_a_budget_too_small_is_refused_naming_the_bits_needed():
  mech = mechanisms.build('pbm', 1.0, num_levels=16, theta=0.1)
  need = wire.wire_bits_needed(mech, 100)
  with pytest.raises(ValueError, match=rf'`wire_bits`={need - 1} .* needs '
                     rf'{need} bits: allowed {need} <= wire_bits <= 31'):
    wire.check_wire_bits(mech, 100, need - 1)
  assert wire.check_wire_bits(mech, 100, need) == need
  with pytest.raises(ValueError, match=r'`wire_bits`.*\[1, 31\]'):
    wire.check_wire_bits(mech, 100, 0)


@pytest.mark.parametrize('name', ['skellam', 'ddgauss', 'gaussian'])
def test_modular_and_central_mechanisms_are_refused(name):
  mech = mechanisms.build(name, 1.0)
  with pytest.raises(ValueError, match='no wire budget'):
    wire.wrap_probability(mech, 10, 8)


def test_a_mechanism_without_a_located_maximum_is_refused():
  mech = mechanisms.build('quantized_gaussian', 1.0, lattice=0)
  with pytest.raises(wire.NoWrapBound, match='lattice >= 2'):
    wire.wire_bits_needed(mech, 10)


def test_error_with_wraps_adds_the_wraps_and_nothing_without_them():
  mech = mechanisms.build('pbm', 1.0, num_levels=16, theta=0.1)
  n = 100
  top = wire.unreduced_bits(16, n)
  exact = wire.debiased_error_with_wraps(mech, n, top)
  util = mech.signal_utility(n)
  assert exact.error == util.error and exact.wrap_probability == 0.0
  narrow = wire.debiased_error_with_wraps(mech, n, 8)
  assert narrow.error_without_wraps == util.error
  assert narrow.wrap_probability > 0 and narrow.error > util.error
  # The Minkowski bound, recomputed from its parts.
  shift = mech.level_step * 2**8 * narrow.wrap_rms / n
  assert narrow.error == pytest.approx((math.sqrt(util.error) + shift)**2,
                                       rel=1e-12)
  with pytest.raises(ValueError, match='`signal_utility`'):
    wire.debiased_error_with_wraps(mech, n, 8,
                                   signal_utility=mech.signal_utility(n - 1))


def test_gaussian_rule_is_close_to_the_proved_bits():
  """TFF's k-std rule and the Chernoff bound agree within two bits."""
  for name, params in [('pbm', dict(num_levels=16, theta=0.1)),
                       ('rqm', dict(num_levels=16)), ('bq', {})]:
    mech = mechanisms.build(name, 1.0, **params)
    assert abs(wire.gaussian_rule_bits(mech, 100) -
               wire.wire_bits_needed(mech, 100)) <= 2


# --- TensorFlow ----------------------------------------------------------------
@pytest.mark.parametrize('centre_halves', [0, 7, 600, 1201])
@pytest.mark.parametrize('modulus', [2, 16, 256])
def test_centred_sum_is_the_exact_sum_inside_the_window(centre_halves, modulus):
  start = wire.window_start(centre_halves, modulus)
  exact = np.arange(start - 2 * modulus, start + 3 * modulus)
  got = wire.centred_sum(tf.constant(exact % modulus), centre_halves / 2.0,
                         modulus).numpy()
  inside = (exact >= start) & (exact < start + modulus)
  c = centre_halves / 2.0
  assert np.all((exact[inside] >= c - modulus / 2) &
                (exact[inside] < c + modulus / 2))
  np.testing.assert_array_equal(got[inside], exact[inside])
  assert np.all((got - exact) % modulus == 0)   # a wrap moves it by kM
  assert np.all(got[~inside] != exact[~inside])


def test_reduce_levels_is_the_residue():
  levels = tf.constant([0, 1, 255, 256, 1000, 70000], tf.int32)
  np.testing.assert_array_equal(wire.reduce_levels(levels, 256).numpy(),
                                np.array([0, 1, 255, 0, 232, 70000 % 256]))


def _sampled_sums(mech, n, x, trials, seed):
  """[trials] level sums of n clients at x, from `mech.encode`."""
  total = np.zeros(trials, np.int64)
  for i in range(n):
    total += mech.encode(tf.fill([trials], tf.constant(x, tf.float32)),
                         tf.constant([seed, i], tf.int64)).numpy()
  return total


@pytest.mark.parametrize('name,params,n', [
    ('pbm', dict(num_levels=16, theta=0.1), 20),
    ('rqm', dict(num_levels=8), 10),
    ('bq', dict(s=2, m=30), 10),
])
def test_measured_wrap_rate_is_within_the_bound(name, params, n):
  """Monte Carlo of the sampler with every client at +c (the worst input of
  the upper tail) at a field where wraps are frequent (the least M whose
  exact wrap probability is <= 2%; the bound's machinery takes any M, 2^b
  among them): the measured rate agrees with the exact law's within its
  binomial tolerance and is at most the proved bound (plus Z standard
  deviations of a rate at the bound). The decode through `centred_sum`
  equals the unreduced sum on every trial without a wrap."""
  mech = mechanisms.build(name, 1.0, **params)
  c = mech.input_bound
  halves = int(round(2 * wire.check_wire_mechanism(mech))) * n
  law = _sum_law(mech, [c] * n)
  m = next(m for m in range(2, law.size + 1)
           if _exact_wraps(law, halves, m)[0] <= 0.02)
  exact, _ = _exact_wraps(law, halves, m)
  bound = wire.LevelSumTails(mech, n).wrap_probability(m)
  assert 0.005 < exact <= bound < 1
  sums = _sampled_sums(mech, n, c, TRIALS, seed=11)
  decoded = wire.centred_sum(tf.constant(sums % m), halves / 2.0, m).numpy()
  wrapped = decoded != sums
  np.testing.assert_array_equal(decoded[~wrapped], sums[~wrapped])
  rate = wrapped.mean()
  assert abs(rate - exact) <= Z * math.sqrt(exact * (1 - exact) / TRIALS)
  assert rate <= bound + Z * math.sqrt(bound * (1 - bound) / TRIALS)


@pytest.mark.usefixtures('tff_context')
@pytest.mark.parametrize('bits', [4, 5, 9])
def test_secure_modular_sum_of_reduced_levels_decodes_to_the_sum(bits):
  """Clients reduce their levels mod 2^b, TFF's SecureModularSumFactory
  sums them, the server centres: the unreduced sum whenever it lies in the
  window, else off by a multiple of 2^b."""
  mech = mechanisms.build('pbm', 1.0, num_levels=16, theta=0.3)
  n, d, m = 4, 64, 2**bits
  level_type = tff.TensorType(np.int32, [d])
  secure = tff.aggregators.SecureModularSumFactory(m).create(level_type)

  @tff.tensorflow.computation(level_type)
  def client(levels):
    return wire.reduce_levels(levels, m)

  @tff.tensorflow.computation(level_type, np.int32)
  def server(total, clients):
    return wire.centred_sum(total, wire.sum_centre(mech, clients), m)

  @tff.federated_computation(tff.FederatedType(level_type, tff.CLIENTS),
                             tff.FederatedType(np.int32, tff.SERVER))
  def round_fn(levels, clients):
    summed = secure.next(secure.initialize(),
                         tff.federated_map(client, levels))
    return tff.federated_map(server, (summed.result, clients))

  rng = np.random.default_rng(bits)
  x = rng.uniform(-1, 1, d).astype(np.float32)
  levels = [mech.encode(tf.constant(x), tf.constant([bits, i], tf.int64))
            .numpy() for i in range(n)]
  exact = np.sum(levels, axis=0)
  got = np.asarray(round_fn(levels, n))
  start = wire.window_start(n * 15, m)
  inside = (exact >= start) & (exact < start + m)
  np.testing.assert_array_equal(got[inside], exact[inside])
  assert np.all((got - exact) % m == 0)
  if bits == 9:   # 2^9 > n(L-1) = 60: never wraps
    np.testing.assert_array_equal(got, exact)
  else:
    assert not np.all(inside)   # the test sees wraps too
  decoded = wire.decode_wire_sum(mech, tf.constant(got % m), n, m).numpy()
  np.testing.assert_allclose(
      decoded, mech.decode(tf.constant(got), n).numpy(), rtol=0, atol=0)
