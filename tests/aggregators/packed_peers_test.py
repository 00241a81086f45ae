"""packed_peers: K clients per value through TFF's own per-client pipeline have
the law of K clients through TFF's DistributedDpSumFactory."""

import math

import numpy as np
import pytest

from tff_quant.program import quiet
quiet.import_tensorflow()

import tensorflow as tf  # pylint: disable=g-import-not-at-top,g-bad-import-order
import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
from tensorflow_federated.python.aggregators import distributed_dp  # pylint: disable=g-import-not-at-top
from tensorflow_federated.python.aggregators import hadamard  # pylint: disable=g-import-not-at-top
from tensorflow_federated.python.aggregators import rotation  # pylint: disable=g-import-not-at-top

from tff_quant.aggregators import packed_peers, peers  # pylint: disable=g-import-not-at-top
from tff_quant.training import packed_clients  # pylint: disable=g-import-not-at-top

pytestmark = pytest.mark.usefixtures('tff_context')

K, BITS = 4, 16
SEED = np.array([20240607, 3], np.int64)   # the round's rotation seed


def _processes(mechanism, row_specs, noise_multiplier, clients, clip):
  """(packed process for one value of K rows, TFF's process for one row)."""
  kw = dict(noise_multiplier=noise_multiplier, expected_clients_per_round=clients,
            bits=BITS, l2_clip=clip, mechanism=mechanism)
  stacked = [tf.TensorSpec([K] + s.shape.as_list(), s.dtype) for s in row_specs]
  packed = packed_peers.PackedDistributedDpSumFactory(K, **kw).create(
      tff.types.tensorflow_to_type(stacked))
  tff_process = distributed_dp.DistributedDpSumFactory(
      rotation_type='hd', **kw).create(tff.types.tensorflow_to_type(row_specs))
  return packed, tff_process


def _state(process, seed=SEED, scale=None, local_stddev=None):
  """process.initialize() with the rotation seed (and scale, noise) set."""
  l2_state, _ = process.initialize()
  discrete = l2_state['inner_agg']
  if scale is not None:
    discrete['scale_factor'] = np.float32(scale)
  if local_stddev is not None:
    dp = discrete['inner_agg_process']
    discrete['inner_agg_process'] = dp._replace(
        query_state=dp.query_state._replace(local_stddev=np.float32(local_stddev)))
  return (l2_state, np.array(seed))


def _signs(dim, seed=SEED):
  return rotation.sample_rademacher([dim], tf.float32, tf.constant(seed)).numpy()


def _hadamard(dim):
  """TFF's orthonormal Walsh-Hadamard matrix (its transform of the identity)."""
  h = hadamard.fast_walsh_hadamard_transform(tf.eye(dim)).numpy().astype(np.float64)
  np.testing.assert_array_equal(h, h.T)
  return h


def _clipped(x, clip):
  return x * min(1.0, clip / np.linalg.norm(x.astype(np.float64)))


@pytest.mark.parametrize('mechanism', packed_peers.MECHANISMS)
def test_the_deterministic_parts_are_tffs_exactly(mechanism):
  """Noise off and rotated, clipped, scaled values on the integer grid (scale
  4, dyadic inputs): rounding is exact, so one packed value of K clients and
  K clients through TFF give the same bits, the exact sum of the clipped
  updates, the same measurements and the same next state. One row is
  clipped (norm 2.5 to 1.25)."""
  d, clip, scale = 16, 1.25, 4.0
  h, signs = _hadamard(d), _signs(d)
  grid = np.zeros((K, d))   # the rows' scaled, rotated values: integers
  grid[0, [1, 5]] = [6, 8]   # norm 10 / scale = 2.5: clipped to 1.25
  grid[1, [0, 3, 9]] = [1, -2, 3]
  grid[2, [2, 15]] = [-4, 3]
  grid[3, 7] = -1
  rows = (signs * ((grid / scale) @ h)).astype(np.float32)   # h^-1 = h
  assert np.all(rows.astype(np.float64) == signs * ((grid / scale) @ h))
  packed, tff_process = _processes(mechanism, [tf.TensorSpec([d], tf.float32)],
                                   1.0, 10, clip)
  state = _state(packed, scale=scale, local_stddev=0.0)
  got = packed.next(state, [[rows]])
  want = tff_process.next(state, [[r] for r in rows])
  np.testing.assert_array_equal(got.result[0], want.result[0])
  exact = sum(_clipped(r.astype(np.float64), clip) for r in rows)
  np.testing.assert_array_equal(got.result[0].astype(np.float64), exact)
  assert got.measurements == want.measurements
  assert got.measurements['actual_num_clients'] == K
  assert got.measurements['padded_dim'] == d
  tf.nest.map_structure(np.testing.assert_array_equal, got.state, want.state)
  assert got.state[1][1] == SEED[1] + 1   # the rotation's seed advanced


def _theory(rows, clip, scale, noise_var, d_pad):
  """(mean, covariance) of the decoded sum of K clients: the clipped sum, and
  H diag(c) H / scale² with c_j = K·noise_var + Σ_k f_kj (1 - f_kj), f the
  fractional parts of the scaled rotated coordinates (rounding variance)."""
  h, signs = _hadamard(d_pad), _signs(d_pad)
  d = rows.shape[1]
  clipped = np.stack([_clipped(r.astype(np.float64), clip) for r in rows])
  padded = np.zeros((len(rows), d_pad))
  padded[:, :d] = clipped
  rotated = (padded * signs) @ h.T * scale
  frac = rotated - np.floor(rotated)
  c = len(rows) * noise_var + np.sum(frac * (1 - frac), axis=0)
  back = h.T * signs[None, :]   # decode: coordinate i = Σ_j (h_ij s_i) y_j
  cov = (back.T * c) @ back / scale**2
  return clipped.sum(axis=0), cov[:d, :d]


@pytest.mark.parametrize('mechanism, noise_multiplier, reps', [
    ('distributed_skellam', 1.0, 100),
    ('distributed_dgauss', 1.0, 100),
    ('distributed_skellam', 0.0, 100),   # rounding alone
])
def test_a_packed_value_has_the_law_of_k_tff_clients(mechanism,
                                                       noise_multiplier, reps):
  """The decoded sum of one packed value of K = 4 clients and of the same 4
  clients through TFF's factory, `reps` times each (same inputs, the same
  round's rotation): per-coordinate means and variances agree with each other
  and with the law (mean: the clipped sum; covariance: `_theory`, with TFF's
  noise variance: Skellam std², discrete Gaussian ⌈std⌉²), within 5 standard
  errors of the estimates (a per-coordinate check and a pooled one, whose
  standard error comes from the theoretical covariance). A packing that
  shared noise or rounding between rows, or dropped a row's noise, lands far
  outside (e.g. 4x the noise variance)."""
  row_specs = [tf.TensorSpec([3, 2], tf.float32), tf.TensorSpec([8], tf.float32)]
  d, d_pad, clip, n = 14, 16, 1.0, 100   # n: the scale leaves no modular wrap
  rng = np.random.default_rng(0)
  rows = rng.normal(size=(K, d))
  rows *= (np.array([0.3, 0.8, 1.5, 4.0]) / np.linalg.norm(rows, axis=1))[:, None]
  rows = rows.astype(np.float32)
  split = lambda r: [r[:6].reshape(3, 2), r[6:]]
  packed, tff_process = _processes(mechanism, row_specs, noise_multiplier, n, clip)
  state = _state(packed)

  def sample(process, value):
    out = [process.next(state, value) for _ in range(reps)]
    return (np.stack([np.concatenate([o.result[0].ravel(), o.result[1]])
                      for o in out]), out[-1].measurements)

  got, m = sample(packed, [[rows[:, :6].reshape(K, 3, 2), rows[:, 6:]]])
  want, m_tff = sample(tff_process, [split(r) for r in rows])
  assert m == m_tff and m['actual_num_clients'] == K
  std = float(m['scaled_local_stddev'])
  noise_var = (math.ceil(std)**2 if mechanism == 'distributed_dgauss'
               else std**2) if noise_multiplier else 0.0
  mean, cov = _theory(rows, clip, float(m['scale_factor']), noise_var, d_pad)
  var = np.diag(cov)
  for name, x in (('packed', got), ('tff', want)):
    z = (x.mean(axis=0) - mean) / np.sqrt(var / reps)
    assert np.all(np.abs(z) < 5), (name, z)
    ratio = x.var(axis=0, ddof=1) / var
    assert np.all(np.abs(np.log(ratio)) < 5 * math.sqrt(2 / (reps - 1))), (
        name, ratio)
    pooled = x.var(axis=0, ddof=1).sum() / var.sum()
    se = math.sqrt(2 * np.sum(cov**2) / (reps - 1)) / var.sum()
    assert abs(pooled - 1) < 5 * se, (name, pooled, se)
  z = (got.mean(axis=0) - want.mean(axis=0)) / np.sqrt(2 * var / reps)
  assert np.all(np.abs(z) < 5), z


def test_fed_avg_with_packed_tff_peers_runs_a_round():
  """FedAvg, K = 2 clients per slot, 4 clients in 2 slots, with
  Peer.factory(2) for each tff_* peer: one round runs under TFF's C++ context,
  the model moves, and its measurements are the accountant's numbers."""
  from tff_quant.training import federated_training as ft  # pylint: disable=g-import-not-at-top
  spec = (tf.TensorSpec([None, 6], tf.float32), tf.TensorSpec([None], tf.int32))

  def model_fn():
    keras = tf.keras.Sequential([tf.keras.layers.InputLayer(input_shape=(6,)),
                                 tf.keras.layers.Dense(3)])
    return tff.learning.models.from_keras_model(
        keras, input_spec=spec,
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))

  rng = np.random.default_rng(1)
  data = {str(i): (rng.normal(size=(5, 6)).astype(np.float32),
                   rng.integers(0, 3, 5).astype(np.int32)) for i in range(4)}
  for name in ('tff_skellam', 'tff_dgauss'):
    peer = peers.Peer(name, 1.0, 1.0, 4, 6 * 3 + 3, 16)
    process = packed_clients.build_packed_fed_avg(
        model_fn, 2, tff.learning.optimizers.build_sgdm(0.1),
        tff.learning.optimizers.build_sgdm(1.0), peer.factory(2),
        metrics_aggregator=tff.learning.metrics.sum_then_finalize,
        vectorized=False)
    state = process.initialize()
    out = process.next(state, packed_clients.pack_datasets(
        data.__getitem__, list(data), 2, 5, vectorized=False))
    ft.check_peer_measurements(peer, out.metrics)
    before = process.get_model_weights(state).trainable
    after = process.get_model_weights(out.state).trainable
    assert any(np.any(a != b) for a, b in zip(after, before))
    found = ft.aggregators.find_measurements(out.metrics, 'actual_num_clients')
    assert found == 4


@pytest.mark.parametrize('kwargs, error, match', [
    (dict(clients_per_value=0), ValueError, 'clients_per_value'),
    (dict(clients_per_value=2.5), (ValueError, TypeError), 'clients_per_value'),
    (dict(mechanism='gaussian'), ValueError, 'mechanism'),
    (dict(bits=23), ValueError, 'bits'),
    (dict(clients_per_value=2**10, bits=22), ValueError,
     r'clients_per_value \* \(2\*\*bits - 1\) must be <= 2\*\*31 - 1'),
    (dict(l2_clip=0.0), ValueError, 'l2_clip'),
    (dict(noise_multiplier=-1.0), ValueError, 'noise_multiplier'),
])
def test_bad_input_names_the_parameter(kwargs, error, match):
  args = dict(clients_per_value=2, noise_multiplier=1.0,
              expected_clients_per_round=4, bits=16, l2_clip=1.0)
  args.update(kwargs)
  with pytest.raises(error, match=match):
    packed_peers.PackedDistributedDpSumFactory(**args)


def test_a_value_without_the_k_axis_is_refused():
  factory = packed_peers.PackedDistributedDpSumFactory(3, 1.0, 6, 16, 1.0)
  with pytest.raises(TypeError, match='stack 3 clients on their first axis'):
    factory.create(tff.TensorType(np.float32, [2, 5]))
  with pytest.raises(ValueError, match='clients_per_value'):
    packed_peers.StackedMeanFactory(factory, 0)


def test_peer_factory_packs_tff_peers_only():
  peer = peers.Peer('tff_dgauss', 1.0, 1.0, 4, 10, 16)
  assert isinstance(peer.factory(2), packed_peers.StackedMeanFactory)
  assert isinstance(peer.factory(), tff.aggregators.UnweightedMeanFactory)
  with pytest.raises(ValueError, match='clients_per_value=2: the central gaussian'):
    peers.Peer('gaussian', 1.0, 1.0, 4, 10).factory(2)
