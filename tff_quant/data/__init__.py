"""Offline federated datasets (EMNIST via TFF cache, Fashion-MNIST, MNIST, sklearn).

`DATASETS`, `SHAPES`, `emnist_cache_path`, `existing_emnist_cache` and
`dirichlet_partition` are read without
TensorFlow; the loaders import it on first use (PEP 562), so a binary refuses
a bad flag before TensorFlow starts.
"""

from tff_quant.data.partition import dirichlet_partition
from tff_quant.data.sources import (DATASETS, SHAPES, emnist_cache_path,
                                    existing_emnist_cache)

_LOADERS = ('FederatedData', 'hold_out_validation', 'validation_indices', 'load',
            'load_emnist', 'load_image_arrays', 'load_sklearn', 'read_idx',
            'scale_pixels')
__all__ = ['DATASETS', 'SHAPES', 'emnist_cache_path', 'existing_emnist_cache',
           'dirichlet_partition', *_LOADERS]


def __getattr__(name):
  """The TensorFlow-backed exports, imported when first read."""
  if name in _LOADERS:
    from tff_quant.data import datasets  # pylint: disable=g-import-not-at-top
    return getattr(datasets, name)
  raise AttributeError(f'module {__name__!r} has no attribute {name!r}')


def __dir__():
  return sorted(set(globals()) | set(__all__))
