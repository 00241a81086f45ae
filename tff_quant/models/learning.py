"""Keras models as TFF learning models: the one `from_keras_model` wrapper."""

from typing import Callable

import tensorflow as tf
import tensorflow_federated as tff


def tff_model_fn(keras_model_fn: Callable[[], tf.keras.Model], input_spec,
                 accuracy: bool = True) -> Callable[[], tff.learning.models.VariableModel]:
  """A no-arg model_fn for tff.learning: a fresh `keras_model_fn()` (logits out)
  with sparse categorical cross-entropy, and its accuracy metric if `accuracy`."""

  def model_fn():
    return tff.learning.models.from_keras_model(
        keras_model_fn(), input_spec=input_spec,
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[tf.keras.metrics.SparseCategoricalAccuracy()] if accuracy else None)
  return model_fn
