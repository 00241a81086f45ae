"""Which datasets exist, their shapes, and where the EMNIST cache is looked
for, readable without TensorFlow (`tff_quant.data`)."""

import os
from typing import Optional

#: The datasets `tff_quant.data.load` reads.
DATASETS = ('emnist', 'fashion_mnist', 'mnist')

#: Each dataset's example shape and number of classes (`FederatedData`'s
#: `input_shape` and `num_classes`): what a model's size is counted from
#: before the data is read (`models.param_count`).
SHAPES = {'emnist': ((28, 28, 1), 62), 'fashion_mnist': ((28, 28, 1), 10),
          'mnist': ((28, 28, 1), 10)}


def emnist_cache_path(cache_dir: Optional[str] = None) -> str:
  """TFF's EMNIST cache file: `cache_dir`/emnist_all.sqlite (default ~/.tff).

  Args:
    cache_dir: the folder, or None for ~/.tff.

  Returns:
    The file's path (it may not exist).
  """
  cache_dir = cache_dir or os.path.join(os.path.expanduser('~'), '.tff')
  return os.path.join(cache_dir, 'emnist_all.sqlite')


def existing_emnist_cache(cache_dir: Optional[str] = None) -> str:
  """`emnist_cache_path`(cache_dir), checked to exist (nothing is downloaded).

  Args:
    cache_dir: the folder, or None for ~/.tff.

  Returns:
    The file's path.

  Raises:
    FileNotFoundError: the file is not there (the message says where to put it).
  """
  path = emnist_cache_path(cache_dir)
  if not os.path.exists(path):
    raise FileNotFoundError(
        f'EMNIST needs TFF\'s decompressed cache file at {path}. Copy '
        'emnist_all.sqlite (from emnist_all.sqlite.lzma, unxz) there, or pass '
        '--emnist_cache_dir; this machine cannot download it.')
  return path
