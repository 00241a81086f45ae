"""Experiment binaries (`python -m experiments.X`).

This package's init runs before a binary imports TensorFlow: it turns
TensorFlow's oneDNN CPU kernels on unless TF_ENABLE_ONEDNN_OPTS is already set
(see tff_quant/__init__.py).
"""

import os

os.environ.setdefault('TF_ENABLE_ONEDNN_OPTS', '1')
