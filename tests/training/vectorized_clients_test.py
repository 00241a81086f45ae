"""Vectorized local training equals each client's sequential training.

Tolerance (float32; the batched ops add in another order than the per-client
ones): every update coordinate within 1e-6 + 1e-5 * |sequential update| of
TFF's own client work, after up to 8 local steps.

Convolutions take one of two paths (one grouped convolution with TensorFlow's
oneDNN kernels on, one convolution per client with them off);
`test_convolution_tests_pass_with_onednn_off_and_on` runs this file's
convolution tests in a subprocess under the TF_ENABLE_ONEDNN_OPTS setting (0
or 1) that this process does not run them under, so both stay green whatever
this machine's CPU turns on by default.
"""

import itertools
import os
import platform
import signal
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_quant import models
from tff_quant.training import packed_clients as pc
from tff_quant.training import vectorized_clients as vc

pytestmark = pytest.mark.usefixtures('tff_context')

ATOL, RTOL = 1e-6, 1e-5
IMAGE = (8, 8, 1)
# Set in the subprocesses `test_convolution_tests_pass_with_onednn_off_and_on`
# starts (they do not start their own).
SUBRUN = 'TFF_QUANT_ONEDNN_SUBRUN'


def dense_fn():
  return tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=(4,)),
      tf.keras.layers.Dense(5, activation='tanh'), tf.keras.layers.Dense(3)])


def conv_fn():
  """Every spatial layer kind: valid and same padding, strides, both pools."""
  return tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=IMAGE),
      tf.keras.layers.Conv2D(3, 3, activation='relu'),
      tf.keras.layers.MaxPool2D(2),
      tf.keras.layers.Conv2D(4, 2, padding='same', strides=1, use_bias=False),
      tf.keras.layers.Activation('tanh'),
      tf.keras.layers.AveragePooling2D(2, padding='same'),
      tf.keras.layers.Conv2D(2, 1, strides=2, activation='sigmoid'),
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(3)])


def model_fn_of(keras_fn):
  shape = keras_fn().input_shape[1:]
  spec = (tf.TensorSpec([None, *shape], tf.float32), tf.TensorSpec([None], tf.int32))
  return models.tff_model_fn(keras_fn, spec)


def clients(keras_fn, sizes, seed=0):
  """{id: (x, y)} of the given sizes (0: no examples), 3 classes."""
  shape = keras_fn().input_shape[1:]
  rng = np.random.RandomState(seed)
  return {f'c{i}': (rng.randn(s, *shape).astype(np.float32),
                    rng.randint(0, 3, s).astype(np.int32))
          for i, s in enumerate(sizes)}


def initial_weights(keras_fn):
  weights = tff.learning.models.ModelWeights.from_model(keras_fn())
  return tff.learning.models.ModelWeights(
      trainable=[w.numpy() for w in weights.trainable], non_trainable=[])


def tff_updates(model_fn, optimizer, weights, arrays, ids, batch, epochs):
  """TFF's own model-delta client work, one client at a time: the reference."""
  work = tff.learning.templates.build_model_delta_client_work(
      model_fn, optimizer, tff.learning.ClientWeighting.UNIFORM)
  out = work.next(work.initialize(), [weights] * len(ids), [
      tf.data.Dataset.from_tensor_slices(arrays[c]).repeat(epochs).batch(batch)
      for c in ids])
  return [r.update for r in out.result], out.measurements['train']


def packed_updates(model_fn, optimizer, weights, arrays, ids, k, batch, epochs,
                   vectorized=True):
  work = pc.build_packed_client_work(model_fn, optimizer, k,
                                     tff.learning.metrics.sum_then_finalize,
                                     vectorized=vectorized)
  out = work.next(work.initialize(), [weights] * (len(ids) // k),
                  pc.pack_datasets(arrays.get, ids, k, batch, epochs,
                                   vectorized=vectorized))
  rows = [[u[j] for u in slot.update] for slot in out.result for j in range(k)]
  return rows, out.measurements['train']


def assert_updates_close(got, want, atol=ATOL):
  for g_rows, w_rows in zip(got, want):
    for g, w in zip(g_rows, w_rows):
      np.testing.assert_allclose(g, w, rtol=RTOL, atol=atol)


# Sizes: empty clients, single examples, partial last batches, several batches.
SIZES = [0, 1, 4, 7, 11, 0, 3, 9]


@pytest.mark.parametrize('keras_fn, optimizer, epochs', [
    (dense_fn, tff.learning.optimizers.build_sgdm(0.2, momentum=0.9), 2),
    (conv_fn, tff.learning.optimizers.build_sgdm(0.3, momentum=0.5), 1),
    # Adam with ε = 1e-3: at the default 1e-7 a coordinate whose gradient is
    # ~0 steps by lr·m/√v, where float32 summation order alone moved one
    # entry by 2.3e-5 (0.2%) in one CI run; the vectorized Adam state is
    # what is tested, not that conditioning.
    (dense_fn, tff.learning.optimizers.build_adam(0.05, epsilon=1e-3), 1)])
def test_vectorized_updates_equal_tffs_client_work(keras_fn, optimizer, epochs):
  """Each client's row equals TFF's sequential update for it; metrics too."""
  _check_updates_equal_tffs(keras_fn, optimizer, epochs)


def test_per_client_convolutions_equal_tffs_client_work(monkeypatch):
  """One convolution per client (the path with oneDNN off) through TFF, on
  any machine: the path is chosen where the computation is traced."""
  monkeypatch.setattr(vc, '_onednn', lambda: False)
  assert not vc.StackedModel(conv_fn()).grouped
  _check_updates_equal_tffs(
      conv_fn, tff.learning.optimizers.build_sgdm(0.3, momentum=0.5), 1)


def _check_updates_equal_tffs(keras_fn, optimizer, epochs):
  model_fn = model_fn_of(keras_fn)
  arrays = clients(keras_fn, SIZES)
  ids = sorted(arrays, key=lambda c: int(c[1:]))
  weights = initial_weights(keras_fn)
  want, want_metrics = tff_updates(model_fn, optimizer, weights, arrays, ids, 4,
                                   epochs)
  got, got_metrics = packed_updates(model_fn, optimizer, weights, arrays, ids, 4,
                                    4, epochs)
  assert_updates_close(got, want)
  for i, size in enumerate(SIZES):
    moved = any(np.any(u != 0) for u in got[i])
    assert moved == (size > 0), (i, size)   # an empty client does not move
  assert got_metrics['num_examples'] == want_metrics['num_examples'] == (
      epochs * sum(SIZES))
  assert got_metrics['num_batches'] == want_metrics['num_batches']
  for key in ('loss', 'sparse_categorical_accuracy'):
    np.testing.assert_allclose(got_metrics[key], want_metrics[key], rtol=1e-5)


def test_vectorized_and_sequential_packed_paths_agree_on_every_model():
  """The library's models without dropout (its masks are random) through both
  packed client works, momentum on."""
  for name in ('small_cnn', 'lenet5', 'mlp'):
    shape = (100,) if name == 'mlp' else (28, 28, 1)
    keras_fn = lambda: models.get(name, shape, 3)   # pylint: disable=cell-var-from-loop
    model_fn = model_fn_of(keras_fn)
    arrays = clients(keras_fn, [5, 0, 12, 2], seed=3)
    ids = sorted(arrays)
    opt = tff.learning.optimizers.build_sgdm(0.1, momentum=0.9)
    weights = initial_weights(keras_fn)
    seq, _ = packed_updates(model_fn, opt, weights, arrays, ids, 2, 4, 1, False)
    vec, _ = packed_updates(model_fn, opt, weights, arrays, ids, 2, 4, 1, True)
    # Convolutions sum about 10^4 float32 products per weight (12 examples ×
    # 28·28 positions) in an order the two paths (and, oneDNN off, Eigen's
    # thread split) choose: 2^-24·√10^4·(momentum's 3.4 over 4 steps) is
    # about 2e-5 of the weights' scale, and one CI run saw 5.2e-5 (0.2% of
    # a 0.033 weight). 2e-4 absolute still fails any wrong batch or mask,
    # which moves weights by their own scale (1e-2 to 1e-1).
    assert_updates_close(vec, seq, atol=2e-4)


def test_a_non_finite_client_gives_zeros_and_leaves_the_others_alone():
  arrays = clients(dense_fn, [3, 5, 2])
  x, y = arrays['c1']
  arrays['c1'] = (np.full_like(x, np.inf), y)
  model_fn = model_fn_of(dense_fn)
  opt = tff.learning.optimizers.build_sgdm(0.1)
  weights = initial_weights(dense_fn)
  ids = ['c0', 'c1', 'c2']
  got, _ = packed_updates(model_fn, opt, weights, arrays, ids, 3, 2, 1)
  want, _ = tff_updates(model_fn, opt, weights, arrays, ids, 2, 1)
  assert all(np.all(u == 0) for u in got[1])
  assert all(np.all(u == 0) for u in want[1])   # as TFF's client work does
  assert_updates_close([got[0], got[2]], [want[0], want[2]])


def test_pack_steps_runs_every_batch_once_in_order():
  sizes = [0, 1, 33, 64, 65, 7, 32]
  arrays = [(np.arange(s, dtype=np.float32)[:, None], np.arange(s, dtype=np.int32))
            for s in sizes]
  for epochs in (1, 2):
    data = vc.pack_steps(arrays, 32, epochs)
    seen = {j: [] for j in range(len(sizes))}
    for first, num in data.steps:
      rows = data.rows[first:first + num]
      assert len(set(rows[:, 0])) == num   # a client at most once per step
      for client, base, count, pos, size in rows:
        seen[client].append((pos, size))
        assert data.y[base + (pos % count)] == pos % count
    for j, s in enumerate(sizes):
      total = s * epochs
      want = [(p, min(32, total - p)) for p in range(0, total, 32)]
      assert seen[j] == want, (j, seen[j])


def test_groups_are_the_cheapest_split():
  rng = np.random.RandomState(0)
  for _ in range(20):
    widths = rng.randint(1, 33, rng.randint(1, 7))
    groups = vc._groups(widths, 10.0)   # pylint: disable=protected-access
    assert sorted(np.concatenate(groups).tolist()) == list(range(len(widths)))
    cost = lambda gs: sum(10.0 + len(g) * widths[g].max() for g in gs)
    best = min(
        cost([np.array(g) for g in parts])
        for parts in _partitions(list(range(len(widths)))))
    assert cost(groups) == pytest.approx(best)


def _partitions(items):
  """Every partition of `items` into groups."""
  if not items:
    yield []
    return
  first, rest = items[0], items[1:]
  for part in _partitions(rest):
    for i in range(len(part)):
      yield part[:i] + [[first] + part[i]] + part[i + 1:]
    yield [[first]] + part


def test_unsupported_models_are_named_and_fall_back():
  def batch_norm():
    return tf.keras.Sequential([tf.keras.layers.InputLayer(input_shape=(4,)),
                                tf.keras.layers.BatchNormalization(),
                                tf.keras.layers.Dense(2)])

  def functional():
    inputs = tf.keras.Input((4,))
    return tf.keras.Model(inputs, tf.keras.layers.Dense(2)(inputs))

  def regularized():
    return tf.keras.Sequential([
        tf.keras.layers.InputLayer(input_shape=(4,)),
        tf.keras.layers.Dense(2, kernel_regularizer='l2')])

  def softmax_on_images():
    return tf.keras.Sequential([
        tf.keras.layers.InputLayer(input_shape=IMAGE),
        tf.keras.layers.Conv2D(2, 3, activation='softmax'),
        tf.keras.layers.Flatten(), tf.keras.layers.Dense(2)])

  for fn, reason in ((batch_norm, 'non-trainable weights'),
                     (functional, 'not a tf.keras.Sequential'),
                     (regularized, 'regularization losses'),
                     (softmax_on_images, "activation 'softmax'")):
    assert reason in vc.vectorization_reason(model_fn_of(fn))
  assert vc.vectorization_reason(model_fn_of(conv_fn)) is None
  for name in models.MODELS:   # every model of the library vectorizes
    shape = (100,) if name == 'mlp' else (784,) if name == 'logreg' else (28, 28, 1)
    assert vc.vectorization_reason(model_fn_of(
        lambda: models.get(name, shape, 10))) is None, name   # pylint: disable=cell-var-from-loop
  opt = tff.learning.optimizers.build_sgdm(0.1)
  agg = tff.learning.metrics.sum_then_finalize
  with pytest.raises(ValueError, match='non-trainable weights.*vectorized=False'):
    pc.build_packed_client_work(model_fn_of(batch_norm), opt, 2, agg)
  work = pc.build_packed_client_work(model_fn_of(batch_norm), opt, 2, agg,
                                     vectorized=False)
  assert work.next.type_signature   # the sequential loop builds


@pytest.mark.parametrize('grouped', [True, False],
                         ids=['grouped', 'per_client'])
def test_stacked_forward_matches_keras_per_client(grouped):
  """Forward pass only, K = 3 different weight sets, training off; both
  convolution paths (a grouped convolution's forward pass runs on every CPU)."""
  keras = [conv_fn() for _ in range(3)]
  stacked = vc.StackedModel(keras[0], grouped=grouped)
  assert stacked.grouped == grouped
  weights = [tf.stack(ws) for ws in zip(*[m.trainable_weights for m in keras])]
  x = np.random.RandomState(1).randn(3, 5, *IMAGE).astype(np.float32)
  got = stacked.forward(weights, tf.constant(x), training=False).numpy()
  for a, m in enumerate(keras):
    np.testing.assert_allclose(got[a], m(x[a]).numpy(), rtol=1e-5, atol=1e-6)


def _conv_float64(x, kernel, strides, padding, rate, up):
  """tf.nn.conv2d's definition in float64 numpy: (output, gradient of
  Σ output·up with respect to x, to kernel), x [N, H, W, C], kernel
  [kh, kw, C, O]."""
  (n, height, width, _), (kh, kw, _, cout) = x.shape, kernel.shape
  out_size, pads = [], []
  for size, k, s, d in ((height, kh, strides[0], rate[0]),
                        (width, kw, strides[1], rate[1])):
    span = (k - 1) * d + 1
    out = -(-size // s) if padding == 'same' else -(-(size - span + 1) // s)
    total = max((out - 1) * s + span - size, 0) if padding == 'same' else 0
    out_size.append(out)
    pads.append((total // 2, total - total // 2))
  (oh, ow), (sh, sw), (dh, dw) = out_size, strides, rate
  padded = np.pad(x.astype(np.float64), [(0, 0), *pads, (0, 0)])
  out = np.zeros([n, oh, ow, cout])
  grad_x, grad_k = np.zeros_like(padded), np.zeros(kernel.shape)
  for i in range(kh):
    for j in range(kw):
      window = (slice(None), slice(i * dh, i * dh + (oh - 1) * sh + 1, sh),
                slice(j * dw, j * dw + (ow - 1) * sw + 1, sw))
      tap = kernel[i, j].astype(np.float64)
      out += padded[window] @ tap
      grad_k[i, j] = np.einsum('npqc,npqo->co', padded[window], up)
      grad_x[window] += up @ tap.T
  (top, _), (left, _) = pads
  grad_x = grad_x[:, top:top + height, left:left + width]
  return out, grad_x, grad_k


CONV_CASES = [   # (H, W), kernel, padding, strides, dilation (Keras forbids
  # strides and dilation both > 1)
    (hw, k, pad, s, d)
    for hw, k, pad, (s, d) in itertools.product(
        [(7, 8), (9, 9)], [(1, 1), (2, 3), (3, 3), (4, 2)], ['valid', 'same'],
        [((1, 1), (1, 1)), ((2, 2), (1, 1)), ((1, 3), (1, 1)),
         ((1, 1), (2, 2)), ((1, 1), (1, 2))])]


def test_per_client_convolution_is_conv2d_per_client():
  """`_per_client_conv` (the path with oneDNN off) against the definition of
  tf.nn.conv2d in float64, client by client: values and gradients (inputs,
  filters, biases), over padding, strides, dilation, odd and even sizes and
  kernels.

  Tolerance, from the arithmetic: each value compared is a float32 sum of n
  products, in whatever order the kernels add them (the output: kh·kw·C
  terms; the filters' gradient: B·H'·W', one per output pixel; the inputs':
  at most kh·kw·O; the bias's: B·H'·W'), so within γ_n·Σ|terms| ≈
  n·u·Σ|terms| of exact (Higham, Accuracy and Stability of Numerical
  Algorithms, 3.1; u = 2^-24); the products and the bias add round once more
  each (n + 2).
  Σ|terms| is the same sum on absolute values; the float64 reference's own
  rounding is 2^-29 times smaller. Checked at twice that bound (a margin,
  not a fit: the largest error measured is half the bound itself).
  """
  rng = np.random.RandomState(0)
  u = 2.0**-24
  a, b, cin, cout = 3, 4, 2, 3
  for (h, w), k, pad, strides, rate in CONV_CASES:
    layer = tf.keras.layers.Conv2D(cout, k, padding=pad, strides=strides,
                                   dilation_rate=rate)
    layer.build((None, h, w, cin))
    x = rng.randn(a, b, h, w, cin).astype(np.float32)
    kernel = rng.randn(a, *k, cin, cout).astype(np.float32)
    bias = rng.randn(a, cout).astype(np.float32)
    tensors = [tf.constant(t) for t in (x, kernel, bias)]
    with tf.GradientTape() as tape:
      tape.watch(tensors)
      images = tf.reshape(tensors[0], [a * b, h, w, cin])
      got = vc._per_client_conv(   # pylint: disable=protected-access
          layer, tensors[1], tensors[2], images, tf.constant(a))
      got = tf.reshape(got, [a, b, *got.shape[1:]])
      up = rng.randn(*got.shape).astype(np.float32)
      loss = tf.reduce_sum(got * up)
    grads = tape.gradient(loss, tensors)
    oh, ow = got.shape[2:4]
    case = (h, w, k, pad, strides, rate)
    for i in range(a):
      want, want_x, want_k = _conv_float64(x[i], kernel[i], strides, pad, rate,
                                           up[i])
      size, size_x, size_k = _conv_float64(abs(x[i]), abs(kernel[i]), strides,
                                           pad, rate, abs(up[i]))
      checks = [
          (got[i], want + bias[i], size + abs(bias[i]), k[0] * k[1] * cin),
          (grads[0][i], want_x, size_x, k[0] * k[1] * cout),
          (grads[1][i], want_k, size_k, b * oh * ow),
          (grads[2][i], up[i].sum((0, 1, 2)), abs(up[i]).sum((0, 1, 2)),
           b * oh * ow)]
      for what, (g, r, terms, n) in zip(('output', 'd/dx', 'd/dkernel',
                                         'd/dbias'), checks):
        bound = 2 * (n + 2) * u * terms
        assert np.all(np.abs(np.asarray(g, np.float64) - r) <= bound), (
            case, what, np.max(np.abs(g - r) / bound))


def test_convolutions_take_the_path_onednn_allows(tmp_path):
  """Grouped convolutions iff oneDNN is on (TF_ENABLE_ONEDNN_OPTS, read at
  TensorFlow's import, decides it where it is set); `cpu_facts` reports it."""
  onednn = vc._onednn()   # pylint: disable=protected-access
  assert vc.StackedModel(conv_fn()).grouped == onednn
  setting = os.environ.get('TF_ENABLE_ONEDNN_OPTS')
  if setting == '0':
    assert not onednn
  elif (setting == '1' and platform.system() == 'Linux' and
        platform.machine() == 'x86_64'):
    assert onednn   # TF's Linux x86-64 wheels carry oneDNN
  assert vc.cpu_facts().onednn == onednn
  info = tmp_path / 'cpuinfo'
  info.write_text('processor\t: 0\nmodel name\t: AMD EPYC 7B13\n'
                  'flags\t\t: fpu sse2 avx avx2 fma\n\n'
                  'processor\t: 1\nmodel name\t: AMD EPYC 7B13\n')
  facts = vc.cpu_facts(str(info))
  assert (facts.model, facts.avx512) == ('AMD EPYC 7B13', False)
  info.write_text('model name\t: Intel(R) Xeon(R) Processor\n'
                  'flags\t\t: avx2 avx512f avx512bw\n')
  facts = vc.cpu_facts(str(info))
  assert (facts.model, facts.avx512) == ('Intel(R) Xeon(R) Processor', True)
  assert 'AVX-512 yes' in facts.describe()
  assert f'oneDNN {"on" if onednn else "off"}' in facts.describe()
  assert vc.cpu_facts(str(tmp_path / 'absent')).avx512 is False


@pytest.mark.skipif(os.environ.get(SUBRUN) == '1',
                    reason='already in a subprocess of this test')
def test_convolution_tests_pass_with_onednn_off_and_on():
  """This file's convolution tests pass with oneDNN off (the path of CPUs
  without AVX-512: TF 2.14 turns it on by default only with them) and on.

  Each setting runs in a fresh process (the variable is read when TensorFlow
  is imported), in its own process group so that a timeout ends its TFF
  workers too; its own session fixture ends them otherwise. The setting of
  this process (tests/conftest.py sets 1 unless TF_ENABLE_ONEDNN_OPTS is
  given) is not run again: the same tests run here, in process, under it
  (a subprocess of it would repeat them, TensorFlow's import included).
  """
  selected = ('(conv or stacked or unsupported or every_model or onednn) '
              'and not off_and_on')
  here = os.environ.get('TF_ENABLE_ONEDNN_OPTS')
  for setting in [s for s in ('0', '1') if s != here]:
    env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS=setting, **{SUBRUN: '1'})
    proc = subprocess.Popen(   # pylint: disable=consider-using-with
        [sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider',
         os.path.abspath(__file__), '-k', selected],
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(
            os.path.abspath(__file__)))),
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True)
    try:
      out, _ = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
      os.killpg(proc.pid, signal.SIGKILL)
      out, _ = proc.communicate()
      pytest.fail(f'TF_ENABLE_ONEDNN_OPTS={setting}: timed out\n{out[-3000:]}')
    assert proc.returncode == 0, (
        f'TF_ENABLE_ONEDNN_OPTS={setting}:\n{out[-5000:]}')
    assert ' passed' in out and 'skipped' not in out, out[-2000:]


@pytest.mark.parametrize('n, dim, units, k', [
    (100, 5994, 2, 50), (400, 5994, 2, 200), (37, 10, 2, 37), (30, 10, 2, 15),
    (1, 10, 2, 1), (40, 10, 16, 4), (12, 10, 5, 3),
    (40, 1_200_000, 2, 20), (40, 3_000_000, 2, 10)])
def test_auto_clients_per_slot(n, dim, units, k):
  assert pc.auto_clients_per_slot(n, dim, units) == k
  assert n % k == 0


@pytest.mark.parametrize('args, name', [
    ((0, 10, 2), 'clients_per_round'), ((10, 0, 2), 'dim'),
    ((10, 10, 0), 'units'), ((2.5, 10, 2), 'clients_per_round')])
def test_auto_clients_per_slot_bad_input(args, name):
  with pytest.raises((ValueError, TypeError), match=name):
    pc.auto_clients_per_slot(*args)


def test_bad_clients_per_slot_is_a_clear_error():
  arrays = clients(dense_fn, [1] * 5)
  for vectorized in (True, False):
    with pytest.raises(ValueError, match=r'clients_per_round \(5\) must be a '
                       r'multiple of clients_per_slot \(2\)'):
      pc.pack_datasets(arrays.get, sorted(arrays), 2, 4, vectorized=vectorized)
    with pytest.raises(ValueError, match=r'`clients_per_slot` must be in \[1, '):
      pc.pack_datasets(arrays.get, sorted(arrays), 0, 4, vectorized=vectorized)
  with pytest.raises(ValueError, match=r'`clients_per_slot` must be in \[1, '):
    pc.build_packed_client_work(model_fn_of(dense_fn),
                                tff.learning.optimizers.build_sgdm(0.1), -1,
                                tff.learning.metrics.sum_then_finalize)
