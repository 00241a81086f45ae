"""Session-wide: TFF's secure-sum context once; no worker_binary left behind;
the repository's tools/ scripts as modules.

TensorFlow's oneDNN kernels are turned on (before any test imports TensorFlow)
unless TF_ENABLE_ONEDNN_OPTS is set, as importing tff_quant does: the suite
then runs the same kernels on CPUs with and without AVX-512 (TF 2.14's default
turns them on only with AVX-512). TF_ENABLE_ONEDNN_OPTS=0 runs it with them
off (tests/training/vectorized_clients_test.py runs its convolution tests
under the other setting in a subprocess).
"""

import importlib.util
import os

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
os.environ.setdefault('TF_ENABLE_ONEDNN_OPTS', '1')

import pytest  # pylint: disable=g-import-not-at-top

# Its exit hook ends TFF's workers before interpreter teardown, so a session
# that imported TFF but never set a context exits without TFF's
# "Exception ignored in ServiceManager.__del__".
from tff_quant.program import runtime  # pylint: disable=g-import-not-at-top,unused-import


@pytest.fixture(scope='session')
def tff_context():
  """TFF's C++ test context (simulates secure sum); workers ended at session end."""
  from tff_quant.program import runtime  # pylint: disable=g-import-not-at-top
  runtime.use_secure_sum_simulation()
  yield
  runtime.stop_workers()
  assert not runtime.worker_pids(), 'TFF worker_binary processes left running'


@pytest.fixture(scope='session')
def repo_tool():
  """load(name): tools/<name>.py imported as a module (tools/ is no package)."""
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

  def load(name):
    spec = importlib.util.spec_from_file_location(
        name, os.path.join(root, 'tools', f'{name}.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
  return load
