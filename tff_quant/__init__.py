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
import sys

os.environ.setdefault('TF_ENABLE_ONEDNN_OPTS', '1')


def _readable_round_errors_hook(exc_type, exc, tb,
                                _previous=sys.excepthook):
  """An uncaught TFF round error, as `runtime.readable_round_errors` reads it.

  A failed check inside a computation (a calibrated schedule, the secure
  sum's capacity) or secure sum run without a context that runs it reach a
  script as TFF's gRPC error of some 1,500 characters; uncaught, it is
  printed as the one-line `RoundCheckError` / `SecureSumContextError` that
  `runtime.readable_round_errors()` raises (TFF's error stays on
  `__context__`). Anything else goes to the previous hook unchanged.
  """
  if isinstance(exc, Exception) and 'tensorflow_federated' in sys.modules:
    from tff_quant.program import runtime  # pylint: disable=g-import-not-at-top
    try:
      with runtime.readable_round_errors():
        raise exc
    except runtime.RoundCheckError as readable:
      _previous(type(readable), readable.with_traceback(None), None)
      return
    except BaseException:  # pylint: disable=broad-except
      pass   # not a round error: as it was
  _previous(exc_type, exc, tb)


sys.excepthook = _readable_round_errors_hook
