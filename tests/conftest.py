"""Session-wide: TFF's secure-sum context once; no worker_binary left behind."""

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
