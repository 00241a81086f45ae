"""Keras models for the experiments, and their TFF learning wrapper.

`MODELS` (the names) and `param_count` (a model's parameters, from its layer
shapes) are read without TensorFlow; `get`, `num_params`, `update_dim` and
`tff_model_fn` import it on first use (PEP 562), so a binary refuses a bad
flag, or plans, before TensorFlow starts.
"""

from tff_quant.models.names import MODELS
from tff_quant.models.param_counts import param_count

__all__ = ['MODELS', 'param_count', 'get', 'num_params', 'update_dim',
           'tff_model_fn']


def __getattr__(name):
  """The TensorFlow-backed exports, imported when first read."""
  if name in ('get', 'num_params', 'update_dim'):
    from tff_quant.models import keras_models  # pylint: disable=g-import-not-at-top
    return getattr(keras_models, name)
  if name == 'tff_model_fn':
    from tff_quant.models import learning  # pylint: disable=g-import-not-at-top
    return learning.tff_model_fn
  raise AttributeError(f'module {__name__!r} has no attribute {name!r}')


def __dir__():
  return sorted(set(globals()) | set(__all__))
