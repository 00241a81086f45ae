"""Offline federated datasets (EMNIST via TFF cache, Fashion-MNIST, MNIST, sklearn)."""

from tff_quant.data.datasets import (DATASETS, FederatedData, emnist_cache_path,
                                     load, load_emnist, load_sklearn, read_idx)
from tff_quant.data.partition import dirichlet_partition
