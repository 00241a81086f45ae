"""Each Keras model's trainable parameters from its layer shapes alone (no
TensorFlow, no numpy): the d a binary plans for, or refuses by, before
TensorFlow starts (about 6 s a process).

`param_count(name, input_shape, num_classes)` equals
`models.num_params(models.get(name, input_shape, num_classes))`, Keras's
count of the model `keras_models` builds; tests/models/param_counts_test.py
checks it for every model.
"""

import math
from typing import Sequence, Tuple

from tff_quant.models.names import MODELS

_Shape = Tuple[int, ...]


def _conv(shape: _Shape, filters: int, kernel: int,
          same: bool = False) -> Tuple[int, _Shape]:
  """Conv2D (stride 1, with bias): its parameters and output shape."""
  if len(shape) != 3:
    raise ValueError(f'Conv2D needs an input of shape (height, width, '
                     f'channels), got {shape}.')
  height, width, channels = shape
  if not same:
    height, width = height - kernel + 1, width - kernel + 1
  if height < 1 or width < 1:
    raise ValueError(f'a {kernel}x{kernel} Conv2D does not fit in {shape}.')
  return kernel * kernel * channels * filters + filters, (height, width,
                                                          filters)


def _pool(shape: _Shape) -> Tuple[int, _Shape]:
  """MaxPool2D(2) or AveragePooling2D(2) (valid padding): no parameters."""
  height, width, channels = shape
  if height < 2 or width < 2:
    raise ValueError(f'a 2x2 pooling does not fit in {shape}.')
  return 0, (height // 2, width // 2, channels)


def _dense(shape: _Shape, units: int) -> Tuple[int, _Shape]:
  """Dense (with bias) after a Flatten of `shape`."""
  return math.prod(shape) * units + units, (units,)


def _layers(name: str, num_classes: int):
  """The layers of model `name` with parameters or a shape change, in order
  (Dropout, Flatten and activations change neither), as
  (layer function, its arguments)."""
  return {
      'emnist_cnn': [(_conv, 32, 3), (_conv, 64, 3), (_pool,), (_dense, 128),
                     (_dense, num_classes)],
      'small_cnn': [(_conv, 8, 5), (_pool,), (_conv, 16, 5), (_pool,),
                    (_dense, num_classes)],
      'lenet5': [(_conv, 6, 5, True), (_pool,), (_conv, 16, 5), (_pool,),
                 (_dense, 120), (_dense, 84), (_dense, num_classes)],
      'alexnet_small': [(_conv, 32, 3, True), (_pool,), (_conv, 64, 3, True),
                        (_pool,), (_conv, 64, 3, True), (_dense, 128),
                        (_dense, num_classes)],
      'mlp': [(_dense, 32), (_dense, num_classes)],
      'logreg': [(_dense, num_classes)],
  }[name]


def param_count(name: str, input_shape: Sequence[int], num_classes: int) -> int:
  """The trainable parameters of model `name` (one of MODELS), as
  `models.get(name, input_shape, num_classes)` builds it.

  Args:
    name: the model's name.
    input_shape: one example's shape, e.g. (28, 28, 1).
    num_classes: the classes (the last layer's units).

  Returns:
    The parameter count (the coordinates of the model's update).

  Raises:
    ValueError: an unknown model, or an input shape its layers do not fit.
  """
  if name not in MODELS:
    raise ValueError(f'Unknown model {name!r}; choose one of {MODELS}.')
  shape, total = tuple(input_shape), 0
  for layer, *args in _layers(name, num_classes):
    params, shape = layer(shape, *args)
    total += params
  return total
