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


# The files holding the suite's longest tests, longest first (the longest
# test of each, pytest --durations on 2 cores: fl_table's 76-160 s down to
# ~20 s). They run first: with pytest-xdist's worksteal each worker then
# ends on short tests instead of one worker finishing a long one alone (the
# idle tail was ~70 s of the suite's wall time). Only the order changes;
# the tests of a file keep theirs.
_LONGEST_FIRST = (
    'tests/experiments/fl_table_test.py',
    'tests/experiments/bq_sgd_test.py',
    'tests/experiments/anchor_scale_test.py',
    'tests/accounting/calibration_test.py',
    'tests/experiments/qmgeo_mnist_test.py',
    'tests/experiments/qgauss_mia_test.py',
    'tests/experiments/fl_emnist_test.py',
    'tests/colab_test.py',
    'tests/training/vectorized_clients_test.py',
    'tests/docs_test.py',
    'tests/experiments/fl_validation_test.py',
    'tests/training/federated_training_test.py',
    'tests/program/experiment_test.py',
    'tests/experiments/fl_tune_test.py',
    'tests/program/which_mechanism_test.py',
    'tests/experiments/rqp_sgd_test.py',
    'tests/accounting/secure_sum/convolution_test.py',
    'tests/mechanisms/registry_test.py',
    'tests/experiments/privacy_frontier_test.py',
    'tests/program/runtime_test.py',
)


def pytest_collection_modifyitems(items):
  """The files of `_LONGEST_FIRST` first, in its order (a stable sort)."""
  rank = {path: i for i, path in enumerate(_LONGEST_FIRST)}
  items.sort(key=lambda item: rank.get(item.nodeid.split('::')[0],
                                       len(rank)))
