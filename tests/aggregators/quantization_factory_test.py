import collections

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_quant import accounting, aggregators, mechanisms
from tff_quant.aggregators import quantization_factory as qf

pytestmark = pytest.mark.usefixtures('tff_context')

NESTED = tff.types.StructWithPythonType(
    [('dense', tff.types.StructWithPythonType(
        [tff.TensorType(np.float32, [3, 2]), tff.TensorType(np.float32, [2])],
        list)),
     ('bias', tff.TensorType(np.float32, [4]))], collections.OrderedDict)

# Every registered mechanism at its defaults, plus a rotated one.
FACTORIES = {name: (lambda n=name: aggregators.mechanism_factory(n, 1.0))
             for name in mechanisms.registry()}
FACTORIES['rqm_rotated'] = lambda: aggregators.rqm_factory(1.0, rotate=True)


def nested_value(scale):
  return collections.OrderedDict(
      dense=[np.full([3, 2], scale, np.float32), np.full([2], -scale, np.float32)],
      bias=np.linspace(-scale, scale, 4).astype(np.float32))


@pytest.mark.parametrize('name', sorted(FACTORIES))
def test_type_signatures_and_only_secure_aggregation(name):
  process = FACTORIES[name]().create(NESTED)
  assert process.initialize.type_signature.parameter is None
  assert process.initialize.type_signature.result.placement is tff.SERVER
  params = process.next.type_signature.parameter
  assert params[0].placement is tff.SERVER
  assert params[1] == tff.FederatedType(NESTED, tff.CLIENTS)
  assert process.next.type_signature.result.result == tff.FederatedType(
      NESTED, tff.SERVER)
  tff.test.assert_not_contains_unsecure_aggregation(process.next)
  out = process.next(process.initialize(), [nested_value(0.1)] * 3)
  assert aggregators.find_measurements(out.measurements)['num_clients'] == 3
  tf.nest.assert_same_structure(out.result, nested_value(0.0))


def test_whole_next_type_signature_is_pinned():
  vt = tff.TensorType(np.float32, [5])
  process = aggregators.pbm_factory(1.0).create(vt)
  state = tff.FederatedType(tff.StructWithPythonType([
      ('round_num', tff.TensorType(np.int64)), ('level_sum', ()),
      ('count_sum', ())], collections.OrderedDict), tff.SERVER)
  quant = tff.StructWithPythonType([
      ('num_clients', tff.TensorType(np.int32)),
      ('bits_per_coordinate', tff.TensorType(np.int32)),
      ('bits_per_client', tff.TensorType(np.int64)),
      ('secure_sum_bits', tff.TensorType(np.int32)),
      ('upload_bits_per_client', tff.TensorType(np.int64)),
      ('clipped_fraction', tff.TensorType(np.float32)),
      ('clipped_clients_fraction', tff.TensorType(np.float32)),
      ('nonfinite_count', tff.TensorType(np.int32))], collections.OrderedDict)
  signature = process.next.type_signature
  assert signature.parameter[0] == state
  assert signature.parameter[1] == tff.FederatedType(vt, tff.CLIENTS)
  assert signature.result.state == state
  assert signature.result.result == tff.FederatedType(vt, tff.SERVER)
  measurements = signature.result.measurements
  assert measurements.placement is tff.SERVER
  assert measurements.member.quantization == quant
  assert process.initialize.type_signature.result == state


def test_inner_sum_factory_state_is_carried_and_mechanism_is_exposed():
  vt = tff.TensorType(np.float32, [5])
  inner = qf.QuantizationFactory(mechanisms.PBM(1.0, 16, 0.25),
                                 sum_factory=tff.aggregators.SumFactory())
  process = inner.create(vt)
  assert inner.created.dim == 5 and inner.created.mechanism.theta == 0.25
  out = process.next(process.initialize(), [np.zeros(5, np.float32)] * 2)
  assert out.state['round_num'] == 1
  out = process.next(out.state, [np.zeros(5, np.float32)] * 2)
  assert out.state['round_num'] == 2
  rotated = aggregators.rqm_factory(1.0, rotate=True)
  [found] = aggregators.mechanisms_used(rotated, tff.TensorType(np.float32, [5]))
  assert found.dim == 8  # Hadamard pads 5 to 8
  assert abs(found.mechanism.input_bound - 1.0 / np.sqrt(8)) < 1e-12
  with pytest.raises(TypeError, match='sum_factory'):
    qf.QuantizationFactory(mechanisms.PBM(1.0, 16, 0.25), sum_factory='secure')


@pytest.mark.parametrize('mech', [
    mechanisms.RQM(clip=0.5, delta=0.5, num_levels=16, q=0.42),
    mechanisms.PBM(clip=0.5, num_levels=16, theta=0.25),
    mechanisms.BQ(clip=0.5, s=3, m=60),
    mechanisms.QuantizedGaussian(clip=1.0, num_levels=16, sigma=0.02)])
def test_decoded_mean_is_unbiased(mech):
  """Clients hold known values; the mean over rounds and coordinates matches."""
  num_clients, dim, rounds = 8, 4000, 3
  xs = np.array([-0.5, -0.13, 0.0, 0.31, 0.5], np.float64)
  client_values = []
  for c in range(num_clients):
    x = np.roll(xs, c)  # different clients hold different values
    client_values.append(np.resize(x, dim).astype(np.float32))
  process = qf.QuantizationFactory(mech).create(tff.TensorType(np.float32, [dim]))
  state = process.initialize()
  total = np.zeros(dim)
  for _ in range(rounds):
    out = process.next(state, client_values)
    state = out.state
    total += out.result
  est = total / rounds
  true = np.mean(client_values, axis=0)
  # Var of one decoded coordinate = sum over clients of Var(level value) / n^2.
  var = np.zeros(dim)
  for v in client_values:
    for x in xs:
      p = mech.pmf(float(np.float32(x)))
      vx = np.dot(p, mech.levels**2) - np.dot(p, mech.levels)**2
      var[v == np.float32(x)] += vx
  var /= num_clients**2 * rounds
  for value in np.unique(true):  # pool coordinates with the same true mean
    sel = true == value
    err = est[sel].mean() - value
    sd = np.sqrt(var[sel].sum()) / sel.sum()
    assert abs(err) <= 5 * sd + 1e-6, (mech, value, err, sd)


WEIGHTED_ALGORITHMS = {
    'build_weighted_fed_avg': lambda model_fn, agg: (
        tff.learning.algorithms.build_weighted_fed_avg(
            model_fn, tff.learning.optimizers.build_sgdm(0.1),
            model_aggregator=agg)),
    'build_fed_sgd': lambda model_fn, agg: tff.learning.algorithms.build_fed_sgd(
        model_fn, model_aggregator=agg),
    'build_weighted_fed_prox': lambda model_fn, agg: (
        tff.learning.algorithms.build_weighted_fed_prox(
            model_fn, 0.1, tff.learning.optimizers.build_sgdm(0.1),
            model_aggregator=agg)),
    'build_weighted_mime_lite': lambda model_fn, agg: (
        tff.learning.algorithms.build_weighted_mime_lite(
            model_fn, tff.learning.optimizers.build_sgdm(0.1),
            model_aggregator=agg,
            # Mime also releases the clients' full gradients: private too.
            full_gradient_aggregator=aggregators.weighted(
                aggregators.rqm_factory(0.5, seed=2)))),
}


def _small_model_fn():
  keras_fn = lambda: tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=(4,)),
      tf.keras.layers.Dense(3, activation='relu'), tf.keras.layers.Dense(2)])
  from tff_quant import models  # pylint: disable=g-import-not-at-top
  return models.tff_model_fn(keras_fn, (tf.TensorSpec([None, 4], tf.float32),
                                        tf.TensorSpec([None], tf.int32)))


def _client_data(num=3):
  return [tf.data.Dataset.from_tensor_slices(
      (np.random.RandomState(i).randn(8, 4).astype(np.float32),
       np.arange(8, dtype=np.int32) % 2)).batch(4) for i in range(num)]


@pytest.mark.parametrize('algorithm', sorted(WEIGHTED_ALGORITHMS))
def test_weighted_algorithms_take_the_weighted_form(algorithm):
  agg = aggregators.weighted(aggregators.rqm_factory(0.5, seed=1))
  with aggregators.recording() as used:
    process = WEIGHTED_ALGORITHMS[algorithm](_small_model_fn(), agg)
  assert used and used[0].dim == 4 * 3 + 3 + 3 * 2 + 2
  out = process.next(process.initialize(), _client_data())
  quant = aggregators.find_measurements(out.metrics['aggregator'])
  assert quant['num_clients'] == 3
  with pytest.raises(TypeError, match='UnweightedAggregationFactory'):
    aggregators.weighted(agg)


def test_weighted_form_ignores_weights_so_the_mean_is_uniform():
  vt = tff.TensorType(np.float32, [3])
  exact = qf.QuantizationFactory(
      mechanisms.PBM(1.0, 2**20, 0.5 - 1e-9), seed=1)  # ~deterministic levels
  process = aggregators.weighted(exact).create(vt, tff.TensorType(np.float32))
  values = [np.full(3, 0.5, np.float32), np.full(3, -0.25, np.float32)]
  out = process.next(process.initialize(), values, [100.0, 1.0])
  np.testing.assert_allclose(out.result, 0.125, atol=0.01)  # not 0.495


def test_mechanisms_used_sees_through_tff_wrappers():
  vt = tff.StructWithPythonType([tff.TensorType(np.float32, [5]),
                                 tff.TensorType(np.float32, [3])], list)
  inner = aggregators.pbm_factory(1.0)
  for wrapped in (tff.aggregators.clipping_factory(2.0, inner),
                  tff.aggregators.concat_factory(inner),
                  aggregators.weighted(inner),
                  tff.aggregators.HadamardTransformFactory(inner)):
    used = aggregators.mechanisms_used(wrapped, vt)
    assert len(used) >= 1 and all(isinstance(u.mechanism, mechanisms.PBM)
                                  for u in used), wrapped
  [rot] = aggregators.mechanisms_used(
      tff.aggregators.HadamardTransformFactory(inner),
      tff.TensorType(np.float32, [5]))
  assert rot.dim == 8


def test_recording_blocks_nest_and_see_their_own_thread_only():
  """A block gets every create run while it is open, nested or not; a create
  in another thread (its own block) does not reach it."""
  import threading  # pylint: disable=g-import-not-at-top
  vt = tff.TensorType(np.float32, [4])
  other = []
  with aggregators.recording() as outer:
    with aggregators.recording() as inner:
      aggregators.pbm_factory(1.0).create(vt)
    aggregators.rqm_factory(1.0).create(vt)
    thread = threading.Thread(target=lambda: other.append(
        aggregators.mechanisms_used(aggregators.pbm_factory(1.0), vt)))
    thread.start()
    thread.join()
  assert [type(u.mechanism).__name__ for u in inner] == ['PBM']
  assert [type(u.mechanism).__name__ for u in outer] == ['PBM', 'RQM']
  assert len(other) == 1 and len(other[0]) == 1
  with aggregators.recording() as after:
    pass
  assert after == []


def test_a_builder_is_called_with_k_times_the_clip_over_root_d():
  """c∞ = k·clip_norm/√d (`accounting.setting.coordinate_clip`), d the padded
  size where the factory rotates."""
  from tff_quant.accounting import setting  # pylint: disable=g-import-not-at-top
  factory = qf.QuantizationFactory(mechanisms.RQM.for_coordinate_bound,
                                   clip_norm=2.0, coordinate_clip_multiple=3.0)
  [found] = aggregators.mechanisms_used(factory, tff.TensorType(np.float32, [64]))
  assert found.mechanism.input_bound == setting.coordinate_clip(2.0, 64, 3.0)
  assert found.mechanism.input_bound == 0.75
  [rotated] = aggregators.mechanisms_used(
      aggregators.rqm_factory(1.0, coordinate_clip_multiple=3.0, rotate=True),
      tff.TensorType(np.float32, [50]))
  assert rotated.dim == 64 and rotated.mechanism.input_bound == 0.375
  with pytest.raises(ValueError, match='coordinate_clip_multiple'):
    qf.QuantizationFactory(mechanisms.RQM.for_coordinate_bound, clip_norm=1.0,
                           coordinate_clip_multiple=0.0)


def test_plugs_into_fed_avg_and_concat_factory():
  def model_fn():
    keras_model = tf.keras.Sequential([
        tf.keras.layers.InputLayer(input_shape=(4,)),
        tf.keras.layers.Dense(3, activation='relu'),
        tf.keras.layers.Dense(2)])
    return tff.learning.models.from_keras_model(
        keras_model, input_spec=(tf.TensorSpec([None, 4], tf.float32),
                                 tf.TensorSpec([None], tf.int32)),
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))

  data = [tf.data.Dataset.from_tensor_slices(
      (np.random.RandomState(i).randn(8, 4).astype(np.float32),
       np.arange(8, dtype=np.int32) % 2)).batch(4) for i in range(3)]
  for factory in [aggregators.rqm_factory(0.5, seed=1),
                  tff.aggregators.concat_factory(aggregators.pbm_factory(0.5))]:
    process = tff.learning.algorithms.build_unweighted_fed_avg(
        model_fn, client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
        model_aggregator=factory)
    state = process.initialize()
    out = process.next(state, data)
    quant = aggregators.find_measurements(out.metrics['aggregator'])
    assert quant['num_clients'] == 3
    assert quant['bits_per_coordinate'] == 4
    weights_before = process.get_model_weights(state).trainable
    weights_after = process.get_model_weights(out.state).trainable
    assert any(np.any(a != b) for a, b in zip(weights_before, weights_after))


@pytest.mark.parametrize('num_levels, num_clients', [(16, 7), (256, 40), (2, 1)])
def test_bit_measurements(num_levels, num_clients):
  mech = mechanisms.PBM(clip=1.0, num_levels=num_levels, theta=0.25)
  process = qf.QuantizationFactory(mech).create(tff.TensorType(np.float32, [10]))
  out = process.next(process.initialize(),
                     [np.zeros(10, np.float32)] * num_clients)
  m = out.measurements['quantization']
  bits = int(np.ceil(np.log2(num_levels)))
  assert m['bits_per_coordinate'] == bits
  assert m['bits_per_client'] == 10 * bits
  assert m['secure_sum_bits'] == qf.secure_sum_bits(num_clients, num_levels)
  assert m['secure_sum_bits'] == int(np.ceil(np.log2(
      num_clients * (num_levels - 1) + 1)))
  assert m['upload_bits_per_client'] == 10 * m['secure_sum_bits']


def test_clipping_and_nonfinite_are_counted_with_diagnostics_only():
  mech = mechanisms.RQM(clip=0.1, delta=0.1, num_levels=8, q=0.5)
  values = [np.array([0.5, np.nan, 0.05, -np.inf], np.float32),
            np.array([0.0, 0.2, 0.0, 0.0], np.float32)]
  # Default: the server learns n and the level sum, no counts.
  quiet = qf.QuantizationFactory(mech, clip_norm=100.0).create(
      tff.TensorType(np.float32, [4]))
  m = quiet.next(quiet.initialize(), values).measurements['quantization']
  assert m['num_clients'] == 2 and m['nonfinite_count'] == -1
  assert np.isnan(m['clipped_fraction'])
  assert np.isnan(m['clipped_clients_fraction'])
  process = qf.QuantizationFactory(mech, clip_norm=100.0,
                                   diagnostics=True).create(
                                       tff.TensorType(np.float32, [4]))
  m = process.next(process.initialize(), values).measurements['quantization']
  assert m['nonfinite_count'] == 2
  assert m['clipped_fraction'] == pytest.approx(2 / 8)
  assert m['clipped_clients_fraction'] == 0.0   # both norms are below 100
  l2 = qf.QuantizationFactory(mech, clip_norm=0.3, diagnostics=True).create(
      tff.TensorType(np.float32, [4]))
  m = l2.next(l2.initialize(), values).measurements['quantization']
  assert m['clipped_clients_fraction'] == pytest.approx(1 / 2)  # 0.5 > 0.3 only


def test_default_seeds_differ_and_reproducible_mode_repeats():
  vt = tff.TensorType(np.float32, [200])
  values = [np.full(200, 0.1, np.float32)] * 2
  secure = aggregators.rqm_factory(10.0, coordinate_clip=1.0).create(vt)
  a = secure.next(secure.initialize(), values).result
  b = secure.next(secure.initialize(), values).result
  assert np.any(a != b), 'default mode repeated the same noise'
  repro = aggregators.rqm_factory(10.0, coordinate_clip=1.0, seed=5).create(vt)
  c = repro.next(repro.initialize(), values)
  d = repro.next(repro.initialize(), values)
  np.testing.assert_array_equal(c.result, d.result)
  e = repro.next(c.state, values)  # next round: different noise
  assert np.any(e.result != c.result)


def test_too_many_or_no_clients_fail_with_the_checks_message():
  from tff_quant.program import runtime  # pylint: disable=g-import-not-at-top
  process = aggregators.pbm_factory(1.0, max_clients_per_round=2).create(
      tff.TensorType(np.float32, [3]))
  with pytest.raises(runtime.RoundCheckError,
                     match=r'^More clients in this round than max_clients_per_round=2'):
    with runtime.readable_round_errors():
      process.next(process.initialize(), [np.zeros(3, np.float32)] * 3)
  with pytest.raises(runtime.RoundCheckError, match='^No clients in round'):
    with runtime.readable_round_errors():
      process.next(process.initialize(), [])


def test_unknown_shape_is_a_clear_type_error():
  with pytest.raises(TypeError, match='fully defined tensor shapes'):
    aggregators.rqm_factory(1.0).create(tff.TensorType(np.float32, [None]))


@pytest.mark.parametrize('build, match', [
    (lambda: qf.QuantizationFactory('rqm'), '`mechanism`'),
    (lambda: aggregators.rqm_factory(0.0), '`clip_norm`'),
    (lambda: aggregators.rqm_factory(1.0, q=1.5), '`q`'),
    (lambda: aggregators.pbm_factory(1.0, theta=0.9), '`theta`'),
    (lambda: aggregators.rqm_factory(1.0, delta_ratio=-1), '`delta_ratio`'),
    (lambda: qf.QuantizationFactory(
        mechanisms.PBM(1.0, 2**16, 0.2), max_clients_per_round=2**16),
     'max_clients_per_round'),
    (lambda: qf.QuantizationFactory(lambda c: None), '`clip_norm`'),
    (lambda: aggregators.rqm_factory(1.0, rotate='yes'), '`rotate`'),
])
def test_invalid_arguments_raise(build, match):
  with pytest.raises((ValueError, TypeError), match=match):
    build()


@pytest.mark.parametrize('build', [
    lambda **kw: aggregators.qmgeo_factory(1.0, full_support=False, **kw),
    lambda **kw: aggregators.pbm_factory(1.0, theta=0.5, **kw),
    lambda **kw: qf.QuantizationFactory(mechanisms.BQ(1.0, 3, 8), **kw),
    lambda **kw: aggregators.pbm_factory(1.0, theta=0.5, coordinate_clip=0.1, **kw)])
def test_no_privacy_mechanisms_are_refused_unless_opted_in(build):
  with pytest.raises(ValueError, match='gives no privacy.*allow_no_privacy'):
    build()
  process = build(allow_no_privacy=True).create(tff.TensorType(np.float32, [3]))
  assert process.next(process.initialize(), [np.zeros(3, np.float32)] * 2).result.shape == (3,)


def test_mechanisms_with_some_privacy_are_accepted():
  qf.QuantizationFactory(mechanisms.BQ(1.0, 2, 251))       # δ₀ ~ 1e-70
  aggregators.pbm_factory(1.0, theta=0.49)
  aggregators.qmgeo_factory(1.0)                             # full support


def test_non_float_value_type_raises():
  with pytest.raises(TypeError, match='float'):
    aggregators.rqm_factory(1.0).create(tff.TensorType(np.int32, [3]))


def test_hadamard_is_the_orthonormal_sylvester_matrix_and_its_own_inverse():
  from scipy import linalg  # pylint: disable=g-import-not-at-top
  x = np.random.RandomState(0).randn(3, 16).astype(np.float32)
  got = qf.hadamard(tf.constant(x)).numpy()
  np.testing.assert_allclose(got, x @ linalg.hadamard(16).T / 4.0, atol=1e-5)
  np.testing.assert_allclose(qf.hadamard(tf.constant(got)).numpy(), x, atol=1e-5)
  signs = qf.rotation_signs(tf.constant(7, tf.int64), 16).numpy()
  assert set(np.unique(signs)) <= {-1.0, 1.0}
  np.testing.assert_array_equal(signs, qf.rotation_signs(tf.constant(7, tf.int64), 16))
  assert np.any(signs != qf.rotation_signs(tf.constant(8, tf.int64), 16).numpy())
  with pytest.raises(ValueError, match='power-of-two'):
    qf.hadamard(tf.zeros([1, 12]))


@pytest.mark.parametrize('per_value', [1, 3])
def test_rotated_factory_returns_the_clients_mean(per_value):
  """A near-deterministic mechanism (PBM, 2^20 levels, θ ≈ 1/2): rotating,
  encoding and un-rotating returns the mean of the clipped updates, packed
  (each row rotated on its own) or not, over rounds with different signs."""
  dim, n = 5, 6
  rng = np.random.RandomState(1)
  rows = rng.uniform(-0.3, 0.3, [n, dim]).astype(np.float32)
  rows[0] *= 10.0   # norm > clip: clipped before rotation
  clipped = rows * np.minimum(1.0, 1.0 / np.linalg.norm(rows, axis=1, keepdims=True))
  factory = qf.QuantizationFactory(mechanisms.PBM(1.0, 2**20, 0.5 - 1e-9),
                                   clip_norm=1.0, seed=3, rotate=True,
                                   clients_per_value=per_value,
                                   diagnostics=True)
  vt = tff.TensorType(np.float32, [dim] if per_value == 1 else [per_value, dim])
  process = factory.create(vt)
  assert factory.created.dim == 8
  values = (list(rows) if per_value == 1 else
            [rows[i:i + per_value] for i in range(0, n, per_value)])
  state = process.initialize()
  for _ in range(2):
    out = process.next(state, values)
    state = out.state
    np.testing.assert_allclose(out.result, clipped.mean(0), atol=2e-3)
    quant = aggregators.find_measurements(out.measurements)
    assert quant['num_clients'] == n
    assert quant['clipped_clients_fraction'] == pytest.approx(1 / n)


# --- From calibration to factory: the calibrated ε holds or the factory refuses.

def _calibrated(dim=64):
  from tff_quant import accounting  # pylint: disable=g-import-not-at-top
  return accounting.calibration_report(
      'rqm', 10.0, 1e-5, 2, 3, 20, dim=dim, bits=4, l2_clip=1.0,
      coordinate_clip=3 / np.sqrt(dim), compare_gaussian=False)


@pytest.fixture(scope='module')
def cal64():
  return _calibrated(64)


def _guarantee(factory, value_type):
  from tff_quant import accounting  # pylint: disable=g-import-not-at-top
  factory.create(value_type)
  c = factory.created
  return accounting.training_guarantee(c.mechanism, 2, 3, 20, 1e-5, dim=c.dim,
                                       l2_clip=1.0, use_pld=False,
                                       orders=c.calibrated_for.orders,
                                       attained=False).epsilon


UNPADDED = tff.TensorType(np.float32, [50])   # rotation pads it to 64


@pytest.mark.parametrize('build', [
    lambda cal: aggregators.rqm_factory(1.0, **cal.params, rotate=True,
                                        coordinate_clip_multiple=3),
    lambda cal: aggregators.rqm_factory(1.0, **cal.params, rotate=True),
    lambda cal: aggregators.rqm_factory(0.5, **cal.params, rotate=True),
    lambda cal: aggregators.mechanism_factory('rqm', 1.0, cal.params,
                                              rotate=True),
], ids=['readme', 'multiple_omitted', 'smaller_clip', 'by_name'])
def test_calibrated_factories_hold_the_target(cal64, build):
  factory = build(cal64)
  # Equal to the last digits: in a process whose earlier tests filled the
  # accountant's caches, the two evaluations may differ by ~1e-14 relative
  # (seen under xdist; a different c∞ or parameter moves ε by far more).
  assert _guarantee(factory, UNPADDED) == pytest.approx(cal64.epsilon,
                                                        rel=1e-12)
  assert factory.created.mechanism.params() == cal64.mechanism.params()
  assert factory.created.calibrated_for == cal64.setting


@pytest.mark.parametrize('build, value_type, match', [
    # The obvious call on a 50-coordinate model: d = 50, not the calibrated 64.
    (lambda cal: aggregators.rqm_factory(1.0, **cal.params), UNPADDED,
     'calibrated for d = 64.*50 coordinates.*rotate=True'),
    (lambda cal: aggregators.rqm_factory(1.0, **cal.params, rotate=True),
     tff.TensorType(np.float32, [100]), 'd = 64.*padded to 128'),
    (lambda cal: aggregators.rqm_factory(1.0, **cal.params, rotate=True,
                                         coordinate_clip_multiple=1),
     UNPADDED, 'coordinate_clip_multiple'),
    (lambda cal: aggregators.rqm_factory(1.0, **cal.params,
                                         coordinate_clip=0.1), UNPADDED,
     'coordinate_clip'),
    (lambda cal: aggregators.rqm_factory(2.0, **cal.params), UNPADDED,
     'clip_norm'),
    (lambda cal: aggregators.rqm_factory(1.0, **dict(cal.params, q=0.9)),
     UNPADDED, 'differ from the calibrated'),
    (lambda cal: aggregators.pbm_factory(1.0, calibrated_for=cal.setting),
     UNPADDED, "calibrated 'rqm', not 'pbm'"),
], ids=['obvious_call_unpadded', 'padded_elsewhere', 'multiple', 'clip',
        'l2_clip', 'tunable', 'other_mechanism'])
def test_calibrated_factories_refuse_another_setting(cal64, build, value_type,
                                                     match):
  with pytest.raises((ValueError, TypeError), match=match):
    build(cal64).create(value_type)


def test_calibrated_at_the_unpadded_dimension_refuses_rotation():
  cal = _calibrated(50)
  with pytest.raises(ValueError, match='calibrated for d = 50.*padded to 64'):
    aggregators.rqm_factory(1.0, **cal.params, rotate=True).create(UNPADDED)
  assert _guarantee(aggregators.rqm_factory(1.0, **cal.params),
                    UNPADDED) == cal.epsilon


def test_attained_calibration_builds_no_factory():
  import dataclasses  # pylint: disable=g-import-not-at-top
  cal = _calibrated(64)
  attained = dataclasses.replace(cal.setting, bound='attained')
  with pytest.raises(ValueError, match='NOT a privacy guarantee'):
    aggregators.rqm_factory(1.0, **cal.tunables, calibrated_for=attained)
  with pytest.raises(TypeError, match='CalibratedSetting'):
    aggregators.rqm_factory(1.0, calibrated_for={'dim': 64})


def test_a_calibration_from_other_accountant_code_builds_no_factory():
  """A setting carries the digest of the code that proved its ε (e.g. one
  pickled by an older version); another process's code refuses it."""
  import dataclasses  # pylint: disable=g-import-not-at-top
  import pickle  # pylint: disable=g-import-not-at-top
  cal = _calibrated(64)
  assert cal.setting.accountant == accounting.provenance.SOURCE_DIGEST
  assert pickle.loads(pickle.dumps(cal.setting)) == cal.setting
  older = dataclasses.replace(cal.setting, accountant='0' * 16)
  with pytest.raises(ValueError, match='accountant code 0{16}.*Calibrate again'):
    aggregators.rqm_factory(1.0, **cal.tunables, calibrated_for=older)


@pytest.mark.parametrize('wrap', [
    lambda f: tff.aggregators.MeanFactory(value_sum_factory=f),
    lambda f: tff.aggregators.UnweightedMeanFactory(value_sum_factory=f),
    lambda f: tff.aggregators.MeanFactory(
        value_sum_factory=tff.aggregators.zeroing_factory(10.0, f)),
], ids=['mean', 'unweighted_mean', 'mean_of_zeroing'])
def test_a_mean_factory_used_as_a_sum_is_refused(wrap):
  factory = wrap(aggregators.rqm_factory(1.0))
  with pytest.raises(TypeError, match=r'aggregators\.weighted'):
    if isinstance(factory, tff.aggregators.WeightedAggregationFactory):
      factory.create(tff.TensorType(np.float32, [4]), tff.TensorType(np.float32))
    else:
      factory.create(tff.TensorType(np.float32, [4]))
  # The documented forms are accepted.
  aggregators.weighted(aggregators.rqm_factory(1.0)).create(
      tff.TensorType(np.float32, [4]), tff.TensorType(np.float32))
  tff.aggregators.zeroing_factory(10.0, aggregators.rqm_factory(1.0)).create(
      tff.TensorType(np.float32, [4]))


def test_zeroing_and_clipping_wrappers_compose_securely_with_secure_counts():
  """TFF's zeroing/clipping wrappers sum a count in plaintext by default; with
  a SecureSumFactory(1) count (docs/privacy.md) the process is secure-only."""
  vt = tff.TensorType(np.float32, [4])
  plain = tff.aggregators.zeroing_factory(10.0, aggregators.rqm_factory(1.0))
  with pytest.raises(AssertionError):
    tff.test.assert_not_contains_unsecure_aggregation(plain.create(vt).next)
  for wrapped in (
      tff.aggregators.zeroing_factory(
          10.0, aggregators.rqm_factory(1.0),
          zeroed_count_sum_factory=tff.aggregators.SecureSumFactory(1)),
      tff.aggregators.clipping_factory(
          10.0, aggregators.rqm_factory(1.0),
          clipped_count_sum_factory=tff.aggregators.SecureSumFactory(1))):
    process = wrapped.create(vt)
    tff.test.assert_not_contains_unsecure_aggregation(process.next)
    out = process.next(process.initialize(), [np.full(4, 0.1, np.float32)] * 3)
    assert np.asarray(out.result).shape == (4,)


# --- The calibrated schedule, enforced inside the process before release.

SMALL = tff.TensorType(np.float32, [16])
FIVE_OF_30 = dict(epsilon=5.0, delta=1e-4, rounds=3, clients_per_round=5,
                  total_clients=30, bits=4, l2_clip=1.0, compare_gaussian=False)


@pytest.fixture(scope='module')
def cal_5_of_30():
  """RQM calibrated to ε = 5 for 3 rounds of 5 of 30 clients, d = 16."""
  return accounting.calibration_report('rqm', dim=16, **FIVE_OF_30)


@pytest.fixture(scope='module')
def cal_3_to_5_of_30():
  """The same, tolerating dropouts down to 3 contributing clients."""
  return accounting.calibration_report('rqm', dim=16, **FIVE_OF_30,
                                       min_clients_per_round=3)


def _values(n):
  return [np.full(16, 0.05 * (i + 1), np.float32) for i in range(n)]


def _refused(process, state, values):
  """The one-line message of a round refused inside the computation. TFF's
  C++ context raises (the raw error carries the same assertion) and
  returns nothing."""
  from tff_quant.program import runtime  # pylint: disable=g-import-not-at-top
  returned = []
  with pytest.raises(Exception) as raw:
    returned.append(process.next(state, values))
  assert not returned
  assert runtime.assertion_message(str(raw.value)).startswith(
      qf.SCHEDULE_REFUSED)
  with pytest.raises(runtime.RoundCheckError) as readable:
    with runtime.readable_round_errors():
      process.next(state, values)
  message = str(readable.value)
  assert message.startswith(qf.SCHEDULE_REFUSED) and '\n' not in message
  return message


def test_fewer_clients_than_calibrated_are_refused_before_release(cal_5_of_30):
  """The issue's row: 2 clients in a round calibrated for 5 (ε 10.07, not 5)."""
  process = aggregators.rqm_factory(1.0, **cal_5_of_30.params).create(SMALL)
  state = process.initialize()
  message = _refused(process, state, _values(2))
  assert message.startswith(
      f'{qf.SCHEDULE_REFUSED} 2 clients contributed to round 1, fewer than the '
      '5 (clients_per_round) the mechanism was calibrated for (5 of 30 '
      f'clients per round): fewer clients add less noise, so its ε = '
      f'{cal_5_of_30.epsilon:.6g} would not hold.')
  assert 'Allowed: 5 to 5 clients per round.' in message
  assert 'min_clients_per_round=k' in message
  # Nothing was consumed: the same state runs the calibrated cohort as round 1.
  out = process.next(state, _values(5))
  assert out.state['round_num'] == 1
  assert aggregators.find_measurements(out.measurements)['num_clients'] == 5


def test_a_round_past_the_calibrated_rounds_is_refused_before_release(
    cal_5_of_30):
  """The issue's row: round 4 of a 3-round calibration (6 rounds: ε 6.34)."""
  process = aggregators.rqm_factory(1.0, **cal_5_of_30.params).create(SMALL)
  state = process.initialize()
  for _ in range(3):
    state = process.next(state, _values(5)).state
  assert state['round_num'] == 3
  message = _refused(process, state, _values(5))
  assert message.startswith(
      f'{qf.SCHEDULE_REFUSED} round 4 of a mechanism calibrated for 3 rounds '
      f'(rounds=3): its ε = {cal_5_of_30.epsilon:.6g} holds for 3 rounds only.')
  assert 'Allowed: rounds 1 to 3.' in message and 'rounds=R' in message


def test_more_clients_than_calibrated_are_refused(cal_5_of_30):
  process = aggregators.rqm_factory(1.0, **cal_5_of_30.params).create(SMALL)
  message = _refused(process, process.initialize(), _values(6))
  assert message.startswith(f'{qf.SCHEDULE_REFUSED} 6 clients contributed to '
                            'round 1, more than the 5 clients per round')
  assert 'rate 5/30' in message and 'Allowed: 5 to 5' in message


def test_a_dropout_tolerant_factory_runs_down_to_its_minimum(cal_3_to_5_of_30):
  cal = cal_3_to_5_of_30
  process = aggregators.rqm_factory(1.0, **cal.params).create(SMALL)
  state = process.initialize()
  for n in (5, 3, 4):
    out = process.next(state, _values(n))
    assert aggregators.find_measurements(out.measurements)['num_clients'] == n
    state = out.state
  fresh = process.initialize()
  message = _refused(process, fresh, _values(2))
  assert ('2 clients contributed to round 1, fewer than the 3 '
          '(min_clients_per_round)') in message
  assert '(5 of 30 clients per round, at least 3 contributing)' in message
  assert 'Allowed: 3 to 5 clients per round.' in message
  assert 'lose at most 2 of them' in message
  assert _refused(process, state, _values(5)).startswith(
      f'{qf.SCHEDULE_REFUSED} round 4 of')


def test_the_schedule_is_enforced_inside_a_tff_learning_process():
  """Any TFF pipeline gets the checks: FedAvg with the calibrated factory
  stops at a short round and past the last round."""
  dim = 4 * 3 + 3 + 3 * 2 + 2
  cal = accounting.calibration_report('rqm', dim=dim, **dict(
      FIVE_OF_30, rounds=2, clients_per_round=3, total_clients=10,
      epsilon=10.0))
  process = tff.learning.algorithms.build_unweighted_fed_avg(
      _small_model_fn(), tff.learning.optimizers.build_sgdm(0.1),
      model_aggregator=aggregators.rqm_factory(1.0, **cal.params),
      metrics_aggregator=tff.learning.metrics.secure_sum_then_finalize)
  state = process.initialize()
  assert 'Outside the calibrated schedule: 2 clients contributed' in _refused(
      process, state, _client_data(2))
  for _ in range(2):
    state = process.next(state, _client_data(3)).state
  assert 'round 3 of a mechanism calibrated for 2 rounds' in _refused(
      process, state, _client_data(3))


def test_a_factory_without_a_calibration_enforces_no_schedule():
  """Raw parameters promised no ε: any cohort and any number of rounds run
  (docs/privacy.md, "From calibration to run")."""
  process = aggregators.rqm_factory(1.0).create(SMALL)
  state = process.initialize()
  for n in (1, 7, 2, 5, 3):
    out = process.next(state, _values(n))
    assert aggregators.find_measurements(out.measurements)['num_clients'] == n
    state = out.state
  assert state['round_num'] == 5


def test_a_max_clients_below_the_calibrated_cohort_is_refused(cal_5_of_30):
  with pytest.raises(ValueError, match=r'`max_clients_per_round`=4 is below '
                     r'the 5 clients per round of the calibration.*>= 5'):
    aggregators.rqm_factory(1.0, **cal_5_of_30.params, max_clients_per_round=4)
  aggregators.rqm_factory(1.0, **cal_5_of_30.params, max_clients_per_round=5)


def test_secure_sum_bits_hold_the_cohorts_sum_or_the_modulus():
  assert qf.secure_sum_bits(100, 256) == 15    # 100·255 + 1 values
  assert qf.secure_sum_bits(1, 2) == 1
  # A modular mechanism's field is its modulus, whatever the cohort.
  assert qf.secure_sum_bits(100, 256, modulus=2**16) == 16
  assert qf.secure_sum_bits(3, 256, modulus=2**16) == 16


# --- A wire budget: the level sum in a field of 2^b (docs/bits.md).


def test_a_wire_budget_decodes_as_the_exact_sum_and_carries_b_bits():
  """Same seeds, same clients: with a field of 2^b the decoded mean equals
  the exact sum's while no coordinate wraps (the wrap bound at this cohort
  is proved <= 1e-4; the seeds fix the draws), and the secure sum carries b
  bits per coordinate."""
  mech = mechanisms.PBM(clip=1.0, num_levels=256, theta=0.05)
  n, vt = 20, tff.TensorType(np.float32, [10])
  rng = np.random.RandomState(4)
  values = list(rng.uniform(-1, 1, [n, 10]).astype(np.float32))
  from tff_quant.mechanisms import wire
  bits = wire.wire_bits_needed(mech, n)
  assert bits < qf.secure_sum_bits(n, 256)
  outs = {}
  for b in (None, bits):
    process = qf.QuantizationFactory(mech, seed=5, max_clients_per_round=n,
                                     wire_bits=b).create(vt)
    outs[b] = process.next(process.initialize(), values)
  np.testing.assert_array_equal(outs[bits].result, outs[None].result)
  m = outs[bits].measurements['quantization']
  assert m['secure_sum_bits'] == bits
  assert m['upload_bits_per_client'] == 10 * bits
  assert m['bits_per_coordinate'] == 8


@pytest.mark.parametrize('build, match', [
    (lambda: qf.QuantizationFactory(
        mechanisms.PBM(1.0, 16, 0.25), max_clients_per_round=7, wire_bits=3),
     r'`wire_bits`=3 cannot hold .* needs \d+ bits'),
    (lambda: qf.QuantizationFactory(mechanisms.PBM(1.0, 16, 0.25),
                                    wire_bits=8),
     'needs the most clients per round'),
    (lambda: qf.QuantizationFactory(
        mechanisms.DistributedSkellam(1.0, 256, 8, 1.0),
        max_clients_per_round=7, wire_bits=8), 'does not apply'),
    (lambda: qf.QuantizationFactory(mechanisms.PBM(1.0, 16, 0.25), wire_bits=0),
     'wire_bits'),
])
def test_a_wire_budget_that_cannot_hold_the_sum_is_refused(build, match):
  with pytest.raises(ValueError, match=match):
    build().create(tff.TensorType(np.float32, [10]))
