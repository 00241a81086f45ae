"""Experiment binaries: `python -m experiments.X` in a checkout, or the console
script `tff-quant-X` (X with '-' for '_', e.g. `tff-quant-fl-emnist`) from any
folder once the package is installed (setup.py). Each binary's `entry_point`
is its console script; both forms run the binary's `main` through
`tff_quant.program.cli.run`.

This package's init runs before a binary imports TensorFlow: it turns
TensorFlow's oneDNN CPU kernels on unless TF_ENABLE_ONEDNN_OPTS is already set
(see tff_quant/__init__.py).
"""

import os

os.environ.setdefault('TF_ENABLE_ONEDNN_OPTS', '1')
