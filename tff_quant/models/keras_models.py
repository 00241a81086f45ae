"""Keras models used by the experiments (built fresh per call; TFF needs that)."""

import tensorflow as tf

from tff_quant.common import dims
from tff_quant.models.names import MODELS



def emnist_cnn(input_shape=(28, 28, 1), num_classes=62):
  """TFF's EMNIST baseline CNN (2 conv + dense, ~1.2M params with 62 classes)."""
  return tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=input_shape),
      tf.keras.layers.Conv2D(32, 3, activation='relu'),
      tf.keras.layers.Conv2D(64, 3, activation='relu'),
      tf.keras.layers.MaxPool2D(2),
      tf.keras.layers.Dropout(0.25),
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(128, activation='relu'),
      tf.keras.layers.Dropout(0.5),
      tf.keras.layers.Dense(num_classes)])


def small_cnn(input_shape=(28, 28, 1), num_classes=10):
  """A ~6k-parameter CNN for fast CPU demos."""
  return tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=input_shape),
      tf.keras.layers.Conv2D(8, 5, activation='relu'),
      tf.keras.layers.MaxPool2D(2),
      tf.keras.layers.Conv2D(16, 5, activation='relu'),
      tf.keras.layers.MaxPool2D(2),
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(num_classes)])


def lenet5(input_shape=(28, 28, 1), num_classes=10):
  """LeNet-5 (BQ-SGD's MNIST model)."""
  return tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=input_shape),
      tf.keras.layers.Conv2D(6, 5, padding='same', activation='tanh'),
      tf.keras.layers.AveragePooling2D(2),
      tf.keras.layers.Conv2D(16, 5, activation='tanh'),
      tf.keras.layers.AveragePooling2D(2),
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(120, activation='tanh'),
      tf.keras.layers.Dense(84, activation='tanh'),
      tf.keras.layers.Dense(num_classes)])


def alexnet_small(input_shape=(28, 28, 1), num_classes=10):
  """A small AlexNet-style CNN for Fashion-MNIST (3 conv + 2 dense; far smaller than AlexNet)."""
  return tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=input_shape),
      tf.keras.layers.Conv2D(32, 3, padding='same', activation='relu'),
      tf.keras.layers.MaxPool2D(2),
      tf.keras.layers.Conv2D(64, 3, padding='same', activation='relu'),
      tf.keras.layers.MaxPool2D(2),
      tf.keras.layers.Conv2D(64, 3, padding='same', activation='relu'),
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(128, activation='relu'),
      tf.keras.layers.Dense(num_classes)])


def mlp(input_shape=(100,), num_classes=10, hidden=32):
  """One hidden layer MLP (QMGeo: PCA-100 -> 32 -> 10, d = 3,562)."""
  return tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=input_shape),
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(hidden, activation='relu'),
      tf.keras.layers.Dense(num_classes)])


def logreg(input_shape=(784,), num_classes=10):
  """Multinomial logistic regression."""
  return tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=input_shape),
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(num_classes)])


def get(name: str, input_shape, num_classes: int):
  """Builds model `name` (one of MODELS)."""
  builders = dict(emnist_cnn=emnist_cnn, small_cnn=small_cnn, lenet5=lenet5,
                  alexnet_small=alexnet_small, mlp=mlp, logreg=logreg)
  if name not in builders:
    raise ValueError(f'Unknown model {name!r}; choose one of {MODELS}.')
  return builders[name](input_shape=tuple(input_shape), num_classes=num_classes)


def num_params(model: tf.keras.Model) -> int:
  """The model's trainable parameters (the coordinates of its update)."""
  return int(sum(w.shape.num_elements() for w in model.trainable_weights))


def update_dim(model: tf.keras.Model, rotate: bool = True) -> int:
  """The d a client sends for this model's update: what to calibrate for.

  Args:
    model: the Keras model trained (its trainable weights are the update).
    rotate: whether the factory rotates (rotate=True zero-pads to 2^m).

  Returns:
    `common.dims.sent_dim(num_params(model), rotate)`.
  """
  return dims.sent_dim(num_params(model), rotate)
