"""TensorFlow imported without its start-up noise, for the binaries.

TF 2.14 prints "Unable to register cuDNN/cuFFT/cuBLAS factory" (ERROR level, so
TF_CPP_MIN_LOG_LEVEL=2 keeps them) and CUDA/TensorRT notices from C++ static
initialisers on every import, on a machine with no GPU. They carry no
information for a CPU run and bury a binary's own one-line errors, so stderr is
silenced for the import only; anything raised is re-raised after it is restored.
TF's "Object was never used" reports (graph-mode asserts that TFF's secure
quantized sum builds and discards: its bound check is not run; harmless for
this library, whose own checks are used) are filtered from its logger.
"""


import contextlib
import logging
import os
import sys


class _DropUnusedObjectReports(logging.Filter):

  def filter(self, record):
    return 'Object was never used' not in record.getMessage()


@contextlib.contextmanager
def _stderr_silenced():
  sys.stderr.flush()
  saved = os.dup(2)
  devnull = os.open(os.devnull, os.O_WRONLY)
  try:
    os.dup2(devnull, 2)
    yield
  finally:
    os.dup2(saved, 2)
    os.close(saved)
    os.close(devnull)


def import_tensorflow(federated: bool = True) -> None:
  """Imports tensorflow (and tensorflow_federated) with stderr silenced."""
  os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
  if 'tensorflow' in sys.modules and (not federated or
                                      'tensorflow_federated' in sys.modules):
    return
  logging.getLogger('tensorflow').addFilter(_DropUnusedObjectReports())
  with _stderr_silenced():
    import tensorflow  # pylint: disable=g-import-not-at-top,unused-import
    if federated:
      import tensorflow_federated  # pylint: disable=g-import-not-at-top,unused-import
