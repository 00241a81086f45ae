import numpy as np
import pytest
import tensorflow_federated as tff

from tff_quant import aggregators, runtime


def test_secure_sum_runs_and_workers_are_stopped(tff_context):
  process = aggregators.pbm_factory(1.0).create(tff.TensorType(np.float32, [3]))
  process.next(process.initialize(), [np.zeros(3, np.float32)] * 2)
  assert runtime.worker_pids(), 'the C++ context should have started a worker'
  runtime.stop_workers()
  assert not runtime.worker_pids()
  # A fresh context starts a fresh worker for the next computation.
  runtime.use_secure_sum_simulation()
  out = process.next(process.initialize(), [np.zeros(3, np.float32)] * 2)
  assert out.measurements['quantization']['num_clients'] == 2
