import math
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_quant import aggregators, mechanisms, models
from tff_quant.training import packed_clients as pc

pytestmark = pytest.mark.usefixtures('tff_context')

SPEC = (tf.TensorSpec([None, 4], tf.float32), tf.TensorSpec([None], tf.int32))


def keras_fn():
  return tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=(4,)),
      tf.keras.layers.Dense(3, activation='relu'), tf.keras.layers.Dense(2)])


MODEL_FN = models.tff_model_fn(keras_fn, SPEC)


def client_arrays(num, seed=0):
  """Clients of different sizes (1 to 9 examples: full and partial batches)."""
  rng = np.random.RandomState(seed)
  out = {}
  for i in range(num):
    size = 1 + (3 * i) % 9
    out[f'c{i}'] = (rng.randn(size, 4).astype(np.float32),
                    rng.randint(0, 2, size).astype(np.int32))
  return out


def plain_dataset(x, y, batch, epochs):
  return tf.data.Dataset.from_tensor_slices((x, y)).repeat(epochs).batch(batch)


@pytest.mark.parametrize('epochs', [1, 2])
def test_packed_batches_are_the_plain_pipeline_batches(epochs):
  arrays = client_arrays(6)
  ids = sorted(arrays)
  slots = pc.pack_datasets(arrays.get, ids, 3, batch_size=4, local_epochs=epochs,
                           vectorized=False)
  assert len(slots) == 2
  for s, slot in enumerate(slots):
    got = list(slot.as_numpy_iterator())
    want = [((x, y), j) for j, cid in enumerate(ids[3 * s:3 * s + 3])
            for x, y in plain_dataset(*arrays[cid], 4, epochs).as_numpy_iterator()]
    assert len(got) == len(want)
    for ((gx, gy), gj), ((wx, wy), wj) in zip(got, want):
      assert gj == wj
      np.testing.assert_array_equal(gx, wx)
      np.testing.assert_array_equal(gy, wy)


@pytest.mark.parametrize('vectorized', [False, True])
def test_packed_client_work_gives_each_clients_tff_update(vectorized):
  """The K rows are what TFF's own FedAvg client work computes (sequential:
  bit for bit; vectorized: to float rounding, tests/training/
  vectorized_clients_test.py)."""
  arrays = client_arrays(6, seed=1)
  arrays['c5'] = (arrays['c5'][0][:0], arrays['c5'][1][:0])   # no examples
  ids = sorted(arrays)
  opt = tff.learning.optimizers.build_sgdm(0.3, momentum=0.5)  # state reset per client
  ours = pc.build_packed_client_work(MODEL_FN, opt, 3,
                                     tff.learning.metrics.sum_then_finalize,
                                     vectorized=vectorized)
  theirs = tff.learning.templates.build_model_delta_client_work(
      MODEL_FN, opt, tff.learning.ClientWeighting.UNIFORM)
  weights = tff.learning.models.ModelWeights.from_model(keras_fn())
  weights = tff.learning.models.ModelWeights(
      trainable=[w.numpy() for w in weights.trainable], non_trainable=[])
  packed = ours.next(ours.initialize(), [weights] * 2,
                     pc.pack_datasets(arrays.get, ids, 3, 4, 2,
                                      vectorized=vectorized))
  plain = theirs.next(theirs.initialize(), [weights] * 6,
                      [plain_dataset(*arrays[c], 4, 2) for c in ids])
  for i in range(6):
    for got, want in zip(packed.result[i // 3].update, plain.result[i].update):
      if vectorized:
        np.testing.assert_allclose(got[i % 3], want, rtol=1e-5, atol=1e-6)
      else:
        np.testing.assert_array_equal(got[i % 3], want)
  assert all(np.all(u[2] == 0) for u in packed.result[1].update)   # empty client
  for key in ('loss', 'sparse_categorical_accuracy', 'num_examples'):
    np.testing.assert_allclose(packed.measurements['train'][key],
                               plain.measurements['train'][key], rtol=1e-5)


def exact_sum_pmf(mech, xs):
  """pmf of the sum over clients of level indices, by convolution."""
  pmf = np.ones(1)
  for x in xs:
    pmf = np.convolve(pmf, mech.pmf(float(np.float32(x))))
  return pmf


@pytest.mark.parametrize('mech', [
    mechanisms.RQM(clip=0.5, delta=0.5, num_levels=4, q=0.42),
    mechanisms.PBM(clip=0.5, num_levels=4, theta=0.25)])
def test_the_server_sees_the_same_law_packed_or_not(mech):
  """Decoded coordinates are iid draws of the level sum (every coordinate holds
  the same inputs); packed (3 per value) and plain both match the exact pmf."""
  xs = np.array([-0.5, -0.2, 0.0, 0.1, 0.37, 0.5], np.float32)
  dim, n = 4000, len(xs)
  pmf = exact_sum_pmf(mech, xs)
  sums = np.arange(pmf.size)
  decoded = mech.decode(tf.constant(sums, tf.int32), n).numpy() / n
  plain = qf_process(mech, dim, 1, seed=5)
  packed = qf_process(mech, dim, 3, seed=5)
  rows = [np.full(dim, x, np.float32) for x in xs]
  for process, values in ((plain, rows),
                          (packed, [np.stack(rows[:3]), np.stack(rows[3:])])):
    out = process.next(process.initialize(), values)
    assert aggregators.find_measurements(out.measurements)['num_clients'] == n
    idx = np.abs(np.asarray(out.result)[:, None] - decoded[None, :]).argmin(1)
    counts = np.bincount(idx, minlength=pmf.size)
    expected = pmf * dim
    big = expected >= 5   # pool the tails so every cell expects >= 5
    obs = np.append(counts[big], counts[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    stat = ((obs - exp)**2 / np.maximum(exp, 1e-12)).sum()
    from scipy import stats  # pylint: disable=g-import-not-at-top
    assert stats.chi2.sf(stat, len(obs) - 1) > 1e-3, (process, stat)


def qf_process(mech, dim, per_value, seed):
  vt = tff.TensorType(np.float32, [dim] if per_value == 1 else [per_value, dim])
  return aggregators.QuantizationFactory(
      mech, seed=seed, clients_per_value=per_value).create(vt)


def test_packed_fed_avg_is_secure_only_and_trains():
  arrays = client_arrays(4, seed=2)
  factory = aggregators.mechanism_factory('rqm', 1.0, dict(num_levels=16),
                                          clients_per_value=2, seed=1)
  with aggregators.recording() as used:
    process = pc.build_packed_fed_avg(
        MODEL_FN, 2, tff.learning.optimizers.build_sgdm(0.1),
        tff.learning.optimizers.build_sgdm(1.0), factory)
  assert used[0].dim == 4 * 3 + 3 + 3 * 2 + 2   # per client, not per slot
  tff.test.assert_not_contains_unsecure_aggregation(process.next)
  state = process.initialize()
  out = process.next(state, pc.pack_datasets(arrays.get, sorted(arrays), 2, 4))
  assert aggregators.find_measurements(out.metrics['aggregator'])['num_clients'] == 4
  assert out.metrics['client_work']['train']['num_examples'] == sum(
      len(y) for _, y in arrays.values())
  before = process.get_model_weights(state).trainable
  after = process.get_model_weights(out.state).trainable
  assert any(np.any(a != b) for a, b in zip(before, after))


def test_bad_packing_is_a_clear_error():
  arrays = client_arrays(5)
  with pytest.raises(ValueError, match=r'clients_per_round \(5\) must be a multiple '
                     r'of clients_per_slot \(2\)'):
    pc.pack_datasets(arrays.get, sorted(arrays), 2, 4)
  with pytest.raises(ValueError, match=r'`clients_per_slot` must be in \[1, inf\)'):
    pc.pack_datasets(arrays.get, sorted(arrays), 0, 4)
  factory = aggregators.mechanism_factory('rqm', 1.0, clients_per_value=3)
  with pytest.raises(TypeError, match='stack 3 clients on its first axis'):
    factory.create(tff.TensorType(np.float32, [2, 5]))


def test_stacked_clipped_mean_is_the_clipped_mean_of_every_client():
  """'none' packed: K rows per value give the plain path's clipped mean."""
  rng = np.random.RandomState(4)
  rows = [[rng.randn(3, 2).astype(np.float32) * s, rng.randn(2).astype(np.float32) * s]
          for s in (0.1, 0.5, 2.0, 0.01, 3.0, 0.7)]   # some over the clip, some not
  plain_type = tff.StructWithPythonType(
      [tff.TensorType(np.float32, [3, 2]), tff.TensorType(np.float32, [2])], list)
  plain = aggregators.clipped_mean_factory(1.0).create(plain_type)
  want = plain.next(plain.initialize(), rows)
  packed = pc.StackedClippedMeanFactory(1.0, 3).create(
      pc.stacked_type(plain_type, 3))
  stacked = [[np.stack([r[i] for r in rows[s:s + 3]]) for i in range(2)]
             for s in (0, 3)]
  got = packed.next(packed.initialize(), stacked)
  for g, w in zip(got.result, want.result):
    np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-7)
  assert got.measurements['clipped_count'] == want.measurements['clipped_count'] == 3
  with pytest.raises(TypeError, match='stack 3 clients on their first axis'):
    pc.StackedClippedMeanFactory(1.0, 3).create(plain_type)
  with pytest.raises(ValueError, match='clip_norm'):
    pc.StackedClippedMeanFactory(0.0, 3)


def test_stacked_central_gaussian_adds_the_servers_noise_once():
  """noise_std > 0 (the central Gaussian): zero updates from 2 slots of 3
  clients give mean N(0, σ²)/6 per coordinate, as TFF's gaussian_fixed with
  stddev z·clip over clients_per_round. 4,000 coordinates: the sample
  variance is within 5 sd of its law's (relative sd √(2/4000))."""
  dim, sigma = 4000, 3.0
  value_type = pc.stacked_type(tff.TensorType(np.float32, [dim]), 3)
  agg = pc.StackedClippedMeanFactory(1.0, 3, noise_std=sigma).create(value_type)
  out = np.asarray(agg.next(agg.initialize(),
                            [np.zeros((3, dim), np.float32)] * 2).result)
  want = (sigma / 6)**2
  assert abs(out.var() / want - 1) < 5 * math.sqrt(2 / dim)
  assert abs(out.mean()) < 5 * math.sqrt(want / dim)
  again = np.asarray(agg.next(agg.initialize(),
                              [np.zeros((3, dim), np.float32)] * 2).result)
  assert not np.array_equal(out, again)   # fresh noise each round
  with pytest.raises(ValueError, match='noise_std'):
    pc.StackedClippedMeanFactory(1.0, 3, noise_std=-1.0)
