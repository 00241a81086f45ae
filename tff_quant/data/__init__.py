"""Offline federated datasets (EMNIST via TFF cache, Fashion-MNIST, MNIST, sklearn)."""

from tff_quant.data.datasets import (DATASETS, FederatedData, emnist_cache_path,
                                     hold_out_validation, validation_indices,
                                     load, load_emnist, load_image_arrays,
                                     load_sklearn, read_idx, scale_pixels)
from tff_quant.data.partition import dirichlet_partition
