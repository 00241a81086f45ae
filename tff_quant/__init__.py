"""tff_quant: TFF aggregation factories for DP via randomized quantization.

Importing it sets TF_ENABLE_ONEDNN_OPTS=1 unless the variable is already set
(a user's explicit 0 or 1 is kept). TensorFlow 2.14 turns its oneDNN CPU
kernels on by default only on CPUs with AVX-512-class features; with them on,
`training.vectorized_clients` runs convolutions as grouped convolutions (its
fast path). The variable is read when TensorFlow is imported: if TensorFlow
was imported before tff_quant, oneDNN is whatever TensorFlow chose then (off
on a CPU without AVX-512 unless the variable was set), and with it off the
vectorized clients run one convolution per client instead (same results to
float rounding, slower). TFF's worker processes, started later, inherit the
variable.
"""

import os

os.environ.setdefault('TF_ENABLE_ONEDNN_OPTS', '1')
