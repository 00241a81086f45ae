"""Session-wide: TFF's secure-sum context once; no worker_binary left behind;
the repository's tools/ scripts as modules."""

import importlib.util
import os

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

import pytest  # pylint: disable=g-import-not-at-top


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
