"""Local training of the K clients of a packed slot as one batched computation.

`packed_clients` puts K simulated clients in one TFF client slot; here their K
models train together: every weight is a tensor with a leading client axis, and
each step runs one batch of every client that still has one, through the
Keras model's layers re-implemented on those stacked weights (a convolution is
one grouped convolution with the clients as groups where TensorFlow runs its
oneDNN CPU kernels, else each client's own convolution in one loop; a dense
layer one batched matmul). Each client's gradient is that of its own mean
batch loss (clients do not mix: the total loss is a sum over clients) and each
client keeps its own optimizer state, so every client's update is the one the
sequential per-client loop computes, up to float rounding
(tests/training/vectorized_clients_test.py).

Ragged work: a step holds only the clients that have a batch left (the others'
weights and optimizer state are not touched), and a partial batch is padded and
masked, its loss the mean over its real examples as `dataset.batch` gives it.

`unsupported_reason` names what a model uses that is not re-implemented here
(then the packed path trains the slot's clients one after another instead).

oneDNN: TensorFlow 2.14 turns its oneDNN kernels on by default only on CPUs
with AVX-512-class features; only they have gradients of grouped convolutions
on CPU. Importing `tff_quant` (or the `experiments`/`benchmarks` packages)
sets TF_ENABLE_ONEDNN_OPTS=1 unless it is already set, which takes effect
when TensorFlow is imported after it; where TensorFlow was imported first, or
the user set TF_ENABLE_ONEDNN_OPTS=0, oneDNN is whatever TensorFlow chose,
and `StackedModel` then runs each client's convolution on its own in one
loop (same result to float rounding, gradients on every CPU, slower:
docs/performance.md). The path is chosen in the process that traces the
computation; the TFF workers it starts inherit its environment. Remote
workers (docs/scaling.md) must run oneDNN if the driver does (`cpu_facts`
says what a process runs).
"""

import collections
import collections.abc
import platform
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

# Element-wise activations: they may run on any layout of the stacked tensors.
_ELEMENTWISE = ('linear', 'relu', 'tanh', 'sigmoid', 'elu', 'selu', 'softplus',
                'softsign', 'swish', 'silu', 'gelu', 'exponential',
                'hard_sigmoid', 'relu6', 'leaky_relu', 'mish')
_REDUCTIONS = ('auto', 'sum_over_batch_size')


def _onednn() -> bool:
  """Whether TensorFlow runs its oneDNN CPU kernels (grouped convolutions)."""
  from tensorflow.python.util import _pywrap_util_port  # pylint: disable=g-import-not-at-top
  return bool(_pywrap_util_port.IsMklEnabled())


class CpuFacts(NamedTuple):
  """What the CPU and TensorFlow's kernels are, for benchmark headers."""
  model: str        # /proc/cpuinfo's model name (else `platform.processor()`)
  avx512: bool      # the CPU reports avx512f
  onednn: bool      # TensorFlow runs its oneDNN CPU kernels in this process

  def describe(self) -> str:
    """One line, e.g. 'CPU: Intel(R) Xeon(R) Processor, AVX-512 yes;
    TensorFlow oneDNN on (convolutions: grouped)'."""
    return (f'CPU: {self.model}, AVX-512 {"yes" if self.avx512 else "no"}; '
            f'TensorFlow oneDNN {"on" if self.onednn else "off"} '
            f'(convolutions: {"grouped" if self.onednn else "one per client"})')


def cpu_facts(cpuinfo: str = '/proc/cpuinfo') -> CpuFacts:
  """The CPU's model name, its AVX-512 support and whether oneDNN is on.

  Args:
    cpuinfo: Linux's CPU description file; where it cannot be read (not
      Linux), the model is `platform.processor()` and AVX-512 is reported
      False.

  Returns:
    A `CpuFacts` (oneDNN as TensorFlow, imported by now, runs it).
  """
  model, flags = '', set()
  try:
    with open(cpuinfo) as f:
      for line in f:
        key, _, value = line.partition(':')
        key = key.strip()
        if key == 'model name' and not model:
          model = value.strip()
        elif key in ('flags', 'Features') and not flags:
          flags = set(value.split())
        if model and flags:
          break
  except OSError:
    pass
  model = model or platform.processor() or platform.machine() or 'unknown'
  return CpuFacts(model, 'avx512f' in flags, _onednn())


def _activation_name(fn) -> str:
  try:
    name = tf.keras.activations.serialize(fn)
  except ValueError:
    return repr(fn)
  return name if isinstance(name, str) else str(name)


class _Layer:
  """One Keras layer as an op on stacked weights (kind, layer, weight indices)."""

  def __init__(self, kind, layer, kernel=None, bias=None, channels=None):
    self.kind, self.layer = kind, layer
    self.kernel, self.bias, self.channels = kernel, bias, channels


class StackedModel:
  """A Keras Sequential model's forward pass with one set of weights per client.

  `forward(weights, x)` takes the model's trainable weights, each with a
  leading client axis A (in `model.trainable_variables` order), and inputs
  x [A, B, ...] (client a's batch in row a) and returns logits [A, B, ...].
  Convolutional layers run either with the clients as groups of channels
  ([B, H, W, A * C], one grouped convolution: oneDNN's kernels, the only CPU
  ones with its gradients) or client-major ([A * B, H, W, C]; each client's
  own convolution, in one loop: gradients on any CPU); dense layers as
  batched matmuls ([A, B, F]).
  Build it only after `unsupported_reason(model)` returned None.
  """

  def __init__(self, model: tf.keras.Model, grouped: Optional[bool] = None):
    """Reads the model's layers.

    Args:
      model: a Keras model `unsupported_reason` accepts.
      grouped: convolutions as one grouped convolution (True) or one per
        client (False); None: grouped iff TensorFlow's oneDNN kernels are on.

    Raises:
      ValueError: `model` is not supported (the reason is in the message).
    """
    reason = unsupported_reason(model)
    if reason:
      raise ValueError(f'cannot vectorize {model.name}: {reason}')
    self.grouped = _onednn() if grouped is None else bool(grouped)
    index = {id(v): i for i, v in enumerate(model.trainable_variables)}
    self.input_shape = tuple(model.input_shape[1:])
    self.spatial = len(self.input_shape) == 3
    self.layers: List[_Layer] = []
    channels = self.input_shape[-1] if self.spatial else None
    for layer in model.layers:
      kind = type(layer).__name__
      if kind == 'InputLayer':
        continue
      kernel = bias = None
      if kind in ('Conv2D', 'Dense'):
        kernel = index[id(layer.kernel)]
        bias = index[id(layer.bias)] if layer.use_bias else None
      if kind == 'Conv2D':
        channels = layer.filters
      self.layers.append(_Layer(kind, layer, kernel, bias, channels))

  def forward(self, weights: Sequence[tf.Tensor], x: tf.Tensor,
              training: bool) -> tf.Tensor:
    """Logits [A, B, classes] of A clients' batches x [A, B, ...]."""
    a, b = tf.shape(x)[0], tf.shape(x)[1]
    h = x
    if self.spatial:
      height, width, chan = self.input_shape
      if self.grouped:   # [A, B, H, W, C] -> [B, H, W, A * C]
        h = tf.reshape(tf.transpose(x, [1, 2, 3, 0, 4]),
                       [b, height, width, a * chan])
      else:   # [A, B, H, W, C] -> [A * B, H, W, C]
        h = tf.reshape(x, [a * b, height, width, chan])
    spatial = self.spatial
    for op in self.layers:
      layer = op.layer
      if op.kind == 'Conv2D':
        bias = None if op.bias is None else weights[op.bias]
        conv = _grouped_conv if self.grouped else _per_client_conv
        h = layer.activation(conv(layer, weights[op.kernel], bias, h, a))
      elif op.kind in ('MaxPooling2D', 'AveragePooling2D'):
        pool = (tf.nn.max_pool2d if op.kind == 'MaxPooling2D'
                else tf.nn.avg_pool2d)
        h = pool(h, layer.pool_size, layer.strides, layer.padding.upper())
      elif op.kind == 'Flatten':
        if spatial and self.grouped:   # [B, H, W, A * C] -> [A, B, H * W * C]
          shape = tf.shape(h)
          h = tf.reshape(h, [b, shape[1], shape[2], a, op.channels])
          h = tf.transpose(h, [3, 0, 1, 2, 4])
          h = tf.reshape(h, [a, b, -1])
        elif spatial:   # [A * B, H, W, C] -> [A, B, H * W * C]
          h = tf.reshape(h, [a, b, -1])
        spatial = False
      elif op.kind == 'Dense':
        h = tf.matmul(h, weights[op.kernel])
        if op.bias is not None:
          h = h + weights[op.bias][:, None, :]
        h = layer.activation(h)
      elif op.kind == 'Dropout':
        if training and layer.rate > 0:
          h = tf.nn.dropout(h, rate=layer.rate)
      elif op.kind == 'Activation':
        h = layer.activation(h)
      else:   # unsupported_reason lets nothing else through
        raise AssertionError(op.kind)
    return h


def _grouped_conv(layer, kernel: tf.Tensor, bias: Optional[tf.Tensor],
                  h: tf.Tensor, a: tf.Tensor) -> tf.Tensor:
  """A Conv2D layer for A clients as one grouped convolution.

  Args:
    layer: the Keras Conv2D layer (shapes, strides, padding, dilation).
    kernel: [A, kh, kw, C, O] the clients' filters.
    bias: [A, O] their biases, or None.
    h: [B, H, W, A * C] the clients' images, client a's channels in group a.
    a: A (a scalar tensor).

  Returns:
    [B, H', W', A * O], before the activation.
  """
  kh, kw, cin, cout = layer.kernel.shape
  # [A, kh, kw, C, O] -> [kh, kw, C, A * O]: group a's filters in group a.
  filters = tf.reshape(tf.transpose(kernel, [1, 2, 3, 0, 4]),
                       [kh, kw, cin, a * cout])
  h = tf.nn.conv2d(h, filters, strides=layer.strides,
                   padding=layer.padding.upper(), dilations=layer.dilation_rate)
  if bias is not None:
    h = h + tf.reshape(bias, [a * cout])
  return h


def _undilated(kernel: tf.Tensor, rate: Tuple[int, int]) -> tf.Tensor:
  """[kh, kw, C, O] -> the kernel of the same convolution at dilation 1: zeros
  between the taps, [(kh - 1) dh + 1, (kw - 1) dw + 1, C, O] (CPU kernels
  without oneDNN have no gradients of dilated convolutions). SAME padding is
  unchanged: TensorFlow pads a dilated kernel by its dilated size."""
  (dh, dw), (kh, kw) = rate, kernel.shape[:2]
  if (dh, dw) == (1, 1):
    return kernel
  up = tf.pad(kernel[:, None, :, None], [[0, 0], [0, dh - 1], [0, 0],
                                        [0, dw - 1], [0, 0], [0, 0]])
  up = tf.reshape(up, [kh * dh, kw * dw, *kernel.shape[2:]])
  return up[:(kh - 1) * dh + 1, :(kw - 1) * dw + 1]


def _per_client_conv(layer, kernel: tf.Tensor, bias: Optional[tf.Tensor],
                     h: tf.Tensor, a: tf.Tensor) -> tf.Tensor:
  """A Conv2D layer for A clients, each client's tf.nn.conv2d in one loop.

  Ungrouped convolutions have gradients on every CPU, so this is the path
  with oneDNN off. `tf.map_fn` runs the clients' convolutions in a while
  loop (parallel iterations), each on its batch and its filters, with
  TensorFlow's own padding and strides (a dilated kernel as the undilated
  one with zeros between its taps: the same convolution). Every client's image
  patches (`tf.image.extract_patches`) times its filters in one batched
  matmul took the same CPU time (small_cnn, emnist_cnn) but holds kh·kw·C
  copies of each input (emnist_cnn's second layer: 1 GB for 50 clients'
  batches of 32).

  Args:
    layer: the Keras Conv2D layer (shapes, strides, padding, dilation).
    kernel: [A, kh, kw, C, O] the clients' filters.
    bias: [A, O] their biases, or None.
    h: [A * B, H, W, C] the clients' images, client-major.
    a: A (a scalar tensor).

  Returns:
    [A * B, H', W', O], before the activation.
  """
  cout = layer.kernel.shape[-1]
  shape = tf.shape(h)
  images = tf.reshape(h, [a, -1, shape[1], shape[2], shape[3]])
  padding = layer.padding.upper()

  def one(args):
    x, w = args
    return tf.nn.conv2d(x, _undilated(w, layer.dilation_rate),
                        strides=layer.strides, padding=padding)

  out = tf.map_fn(one, (images, kernel), fn_output_signature=h.dtype)
  if bias is not None:   # [A, B, H', W', O] + [A, 1, 1, 1, O]
    out = out + bias[:, None, None, None, :]
  size = tf.shape(out)
  return tf.reshape(out, [-1, size[2], size[3], cout])


def unsupported_reason(model) -> Optional[str]:
  """None if `StackedModel` re-implements `model`, else what it lacks (one line).

  Supported: a Sequential model of Conv2D (channels_last, groups 1; with or
  without TensorFlow's oneDNN kernels: `StackedModel`), Max/AveragePooling2D,
  Flatten, Dense (on flat features), Dropout and element-wise Activation
  layers, no regularization losses, no non-trainable weights, inputs of shape
  [features] or [height, width, channels].
  """
  if not isinstance(model, tf.keras.Sequential):
    return f'{type(model).__name__} is not a tf.keras.Sequential model'
  try:
    shape = tuple(model.input_shape[1:])
  except AttributeError:
    return 'its input shape is not defined (no InputLayer)'
  if model.non_trainable_weights:
    return 'it has non-trainable weights (e.g. batch normalization statistics)'
  if model.losses:
    return 'it has regularization losses'
  if len(shape) not in (1, 3) or None in shape:
    return f'its input shape {shape} is neither [features] nor [h, w, c]'
  spatial = len(shape) == 3
  for layer in model.layers:
    kind = type(layer).__name__
    if kind == 'InputLayer':
      continue
    activation = getattr(layer, 'activation', None)
    if activation is not None:
      name = _activation_name(activation)
      if name not in _ELEMENTWISE and not (name == 'softmax' and not spatial):
        return f'layer {layer.name} has activation {name!r}'
    if kind == 'Conv2D':
      if not spatial:
        return f'Conv2D layer {layer.name} follows a Flatten'
      if layer.data_format != 'channels_last' or layer.groups != 1:
        return f'Conv2D layer {layer.name} is not channels_last with groups=1'
    elif kind in ('MaxPooling2D', 'AveragePooling2D'):
      if not spatial or layer.data_format != 'channels_last':
        return f'pooling layer {layer.name} is not on channels_last images'
    elif kind == 'Flatten':
      if layer.data_format != 'channels_last':
        return f'Flatten layer {layer.name} is not channels_last'
      spatial = False
    elif kind == 'Dense':
      if spatial:
        return f'Dense layer {layer.name} acts on unflattened images'
    elif kind == 'Dropout':
      if layer.noise_shape is not None:
        return f'Dropout layer {layer.name} has a noise_shape'
    elif kind != 'Activation':
      return f'layer {layer.name} ({kind}) is not re-implemented'
  return None


def per_example_loss(loss) -> Tuple[Optional[Callable], Optional[str]]:
  """(y, logits) -> per-example losses for a Keras loss that averages over the
  batch, or (None, why not)."""
  if isinstance(loss, tf.keras.losses.Loss):
    if loss.reduction not in _REDUCTIONS:
      return None, f'its loss reduces by {loss.reduction!r}, not the batch mean'
    return loss.call, None
  if callable(loss):   # a Keras loss function: per-example already
    return loss, None
  return None, f'its loss {loss!r} is not a Keras loss'


def split_state(optimizer, state) -> Tuple[Dict, Dict]:
  """(hyper-parameters, per-client part) of a TFF optimizer's state (a dict)."""
  hparams = optimizer.get_hparams(state)
  own = collections.OrderedDict(
      (k, v) for k, v in state.items() if k not in hparams)
  return hparams, own


# TFF optimizers whose `next` is coordinate-wise with scalar hyper-parameters
# and per-weight state: they take the stacked tensors as they are.
_COORDINATEWISE = ('sgdm._SGD', 'adagrad._Adagrad', 'rmsprop._RmsProp')


def stacked_optimizer_step(optimizer, hparams, keys: Sequence[str], own, weights,
                           grads):
  """Each client's `optimizer.next` at once: own state, weights and gradients
  carry a leading client axis; the hyper-parameters are shared. A
  coordinate-wise optimizer (SGD(M), Adagrad, RMSprop) runs once on the
  stacked tensors; any other per client through `tf.vectorized_map`."""
  kind = f'{type(optimizer).__module__.rsplit(".", 1)[-1]}.{type(optimizer).__name__}'

  def one(args):
    state_i, w_i, g_i = args
    full = collections.OrderedDict()
    for k in keys:
      full[k] = hparams[k] if k in hparams else state_i[k]
    new_state, new_w = optimizer.next(full, tuple(w_i), tuple(g_i))
    return (collections.OrderedDict((k, new_state[k]) for k in state_i),
            tuple(new_w))

  if kind in _COORDINATEWISE:
    return one((own, weights, grads))
  return tf.vectorized_map(one, (own, tuple(weights), tuple(grads)),
                           fallback_to_while_loop=False)


class SlotData(NamedTuple):
  """One slot's clients for `vectorized_update` (`pack_steps` makes it):
  x, y: every client's examples once, concatenated; rows [R, 5]: one per
  (client, batch): client, base (its first example in x), count (its examples),
  pos (the batch's first position in its repeated sequence), size; steps
  [S, 2]: one per group of rows trained together: first row, rows."""
  x: np.ndarray
  y: np.ndarray
  rows: np.ndarray
  steps: np.ndarray


# Per-step cost of the batched training, in padded examples (small_cnn on this
# 2-core machine: ~1.2 ms a step, ~50 us an example): `_groups` opens another
# group in a step when that saves more padding than this.
STEP_COST_EXAMPLES = 24


def _groups(widths: np.ndarray, step_cost: float) -> List[np.ndarray]:
  """Splits one step's clients (batch sizes `widths`) into groups run as
  separate batched steps, minimizing sum(step_cost + members * widest member)
  over groups of consecutive clients in decreasing width (exact DP)."""
  order = np.argsort(-widths, kind='stable')
  w = widths[order].astype(np.float64)
  m = len(w)
  best = np.zeros(m + 1)
  cut = np.zeros(m + 1, np.int64)
  for j in range(1, m + 1):   # best[j]: the first j clients; last group i..j-1
    i = np.arange(j)
    cost = best[:j] + step_cost + (j - i) * w[:j]
    cut[j] = np.argmin(cost)
    best[j] = cost[cut[j]]
  out, j = [], m
  while j:
    out.append(order[cut[j]:j])
    j = cut[j]
  return out[::-1]


def pack_steps(client_arrays: Sequence[Tuple[np.ndarray, np.ndarray]],
               batch_size: int, local_epochs: int,
               step_cost: float = STEP_COST_EXAMPLES) -> SlotData:
  """One slot's clients as steps of batches, the input of `vectorized_update`.

  Each client's examples are cut as `repeat(local_epochs).batch(batch_size)`
  cuts them; step t runs batch t of every client that has one, in groups of
  similar batch size (`_groups`; a group is padded to its largest batch).
  """
  counts = np.array([len(y) for _, y in client_arrays], np.int64)
  bases = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
  total = counts * local_epochs
  rows, steps = [], []
  for t in range(int(-(-total.max() // batch_size)) if len(total) else 0):
    active = np.nonzero(total > t * batch_size)[0]
    sizes = np.minimum(batch_size, total[active] - t * batch_size)
    for group in _groups(sizes, step_cost):
      steps.append((len(rows), len(group)))
      for g in group:
        j = active[g]
        rows.append((j, bases[j], counts[j], t * batch_size, sizes[g]))
  return SlotData(
      x=np.concatenate([np.asarray(a, np.float32) for a, _ in client_arrays]),
      y=np.concatenate([np.asarray(b, np.int32) for _, b in client_arrays]),
      rows=np.array(rows, np.int64).reshape(-1, 5),
      steps=np.array(steps, np.int64).reshape(-1, 2))


def slot_dataset(data: SlotData) -> tf.data.Dataset:
  """`data` as TFF client data: a dataset of that one element (TFF's learning
  templates take client data as sequences)."""
  return tf.data.Dataset.from_tensors(tuple(data))


def slot_type(x_spec: tf.TensorSpec, y_spec: tf.TensorSpec):
  """The TFF type of a `slot_dataset` for a model whose batches are x_spec,
  y_spec."""
  return tff.SequenceType(tff.StructWithPythonType([   # SlotData's fields
      tff.TensorType(x_spec.dtype.as_numpy_dtype, x_spec.shape.as_list()),
      tff.TensorType(y_spec.dtype.as_numpy_dtype, y_spec.shape.as_list()),
      tff.TensorType(np.int64, [None, 5]), tff.TensorType(np.int64, [None, 2])],
                                                    tuple))


def _group(data: SlotData, step):
  """Group `step` of a slot: (x [A, B, ...], y [A, B], sizes [A], clients [A]),
  each batch padded with copies of its client's last example."""
  first, num = data.steps[step, 0], data.steps[step, 1]
  client, base, count, pos, size = tf.unstack(data.rows[first:first + num],
                                              axis=1)
  width = tf.reduce_max(size)
  offset = tf.minimum(tf.range(width, dtype=tf.int64)[None], size[:, None] - 1)
  index = base[:, None] + (pos[:, None] + offset) % count[:, None]
  return (tf.gather(data.x, index), tf.gather(data.y, index),
          tf.cast(size, tf.int32), tf.cast(client, tf.int32))


def keras_parts(model) -> Tuple[Optional[tf.keras.Model], Optional[Callable],
                                Optional[str]]:
  """(Keras model, per-example loss, None) of a model made by TFF's
  `from_keras_model`, or (None, None, why it cannot be vectorized).

  Reads the wrapper's `_keras_model` and `_loss_fns` (TFF 0.87 keeps them
  private; the public VariableModel interface has no per-example loss).
  """
  keras_model = getattr(model, '_keras_model', None)
  losses = getattr(model, '_loss_fns', None)
  if keras_model is None or losses is None or not hasattr(model, 'get_metrics'):
    return None, None, ('the TFF model is not a tff.learning.models.'
                        'from_keras_model wrapper')
  if len(losses) != 1:
    return None, None, 'the model has several losses'
  spec = model.input_spec
  if not (isinstance(spec, collections.abc.Mapping) and set(spec) == {'x', 'y'}
          or isinstance(spec, (tuple, list)) and len(spec) == 2):
    return None, None, 'its input_spec is not an (x, y) pair'
  reason = unsupported_reason(keras_model)
  if reason:
    return None, None, reason
  loss, reason = per_example_loss(losses[0])
  if reason:
    return None, None, reason
  return keras_model, loss, None


def vectorization_reason(model_fn) -> Optional[str]:
  """None if `model_fn`'s clients can train vectorized, else why not."""
  with tf.Graph().as_default():
    return keras_parts(model_fn())[2]


def _update_metrics(model, y, logits, losses, num_clients):
  """Adds one step's real examples (y [N], logits [N, ...], per-example
  losses [N]) of `num_clients` clients to the TFF Keras model's metrics, as
  its forward_pass adds each client's batch."""
  updates = []
  for metric in model.get_metrics():
    if metric.name == 'loss':   # the batch mean weighted by the batch size
      updates.append(tf.keras.metrics.Mean.update_state(metric, losses))
    elif metric.name == 'num_batches':   # one per client batch
      updates.append(tf.keras.metrics.Sum.update_state(
          metric, tf.cast(num_clients, metric.dtype)))
    else:
      updates.append(metric.update_state(y, logits))
  return updates


def vectorized_update(model_fn, clients_per_slot: int):
  """The tf.function training one slot's K clients vectorized.

  Takes (optimizer, hparams, initial ModelWeights, the slot's `slot_dataset`)
  and returns (ClientResult with the K updates stacked on a leading
  axis, the model's unfinalized metrics), as `packed_clients`' sequential
  update does: update = initial − trained weights, zeros for a client whose
  update is not finite.
  """
  model = model_fn()
  keras_model, loss_fn, reason = keras_parts(model)
  if reason:
    raise ValueError(f'cannot vectorize the clients\' training: {reason}')
  stacked = StackedModel(keras_model)
  num = clients_per_slot

  @tf.function(reduce_retracing=True)
  def update(optimizer, hparams, initial_weights, dataset):
    data = SlotData(*dataset.get_single_element())
    start = [tf.convert_to_tensor(w) for w in
             tf.nest.flatten(initial_weights.trainable)]
    specs = tuple(tf.TensorSpec(w.shape, w.dtype) for w in start)
    state = optimizer.set_hparams(optimizer.initialize(specs), hparams)
    keys = list(state)
    hp, own = split_state(optimizer, state)
    tile = lambda t: tf.tile(t[None], [num] + [1] * t.shape.rank)
    own = tf.nest.map_structure(lambda t: tile(tf.convert_to_tensor(t)), own)
    weights = tuple(tile(w) for w in start)

    def step(i, weights, own):
      x, y, sizes, clients = _group(data, i)
      mine = [tf.gather(w, clients) for w in weights]
      with tf.GradientTape() as tape:
        tape.watch(mine)
        logits = stacked.forward(mine, x, training=True)
        mask = tf.sequence_mask(sizes, tf.shape(y)[1])
        losses = tf.where(mask, loss_fn(y, logits), 0.0)
        # Each client's mean batch loss; their sum keeps clients apart.
        total = tf.reduce_sum(tf.reduce_sum(losses, 1) /
                              tf.cast(sizes, losses.dtype))
      grads = tape.gradient(total, mine)
      mine_own = tf.nest.map_structure(lambda s: tf.gather(s, clients), own)
      new_own, new = stacked_optimizer_step(optimizer, hp, keys, mine_own,
                                            mine, grads)
      at = clients[:, None]
      with tf.control_dependencies(_update_metrics(
          model, tf.boolean_mask(y, mask), tf.boolean_mask(logits, mask),
          tf.boolean_mask(losses, mask), tf.size(clients))):
        weights = tuple(tf.tensor_scatter_nd_update(w, at, n)
                        for w, n in zip(weights, new))
        own = tf.nest.map_structure(
            lambda s, n: tf.tensor_scatter_nd_update(s, at, n), own, new_own)
      return i + 1, weights, own

    _, weights, _ = tf.while_loop(
        lambda i, *_: i < tf.shape(data.steps, tf.int64)[0], step,
        (tf.constant(0, tf.int64), weights, own))
    rows = []
    finite = tf.ones([num], tf.bool)
    for s, w in zip(start, weights):
      delta = s[None] - w
      rows.append(delta)
      axes = list(range(1, delta.shape.rank))
      finite &= tf.reduce_all(tf.math.is_finite(delta), axis=axes)
    rows = [tf.where(tf.reshape(finite, [num] + [1] * (r.shape.rank - 1)), r,
                     tf.zeros_like(r)) for r in rows]
    result = tff.learning.templates.ClientResult(
        update=tf.nest.pack_sequence_as(initial_weights.trainable, rows),
        update_weight=tf.constant(float(num), tf.float32))
    return result, model.report_local_unfinalized_metrics()

  return update
