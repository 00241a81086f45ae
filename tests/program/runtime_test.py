import os
import pytest
import numpy as np
import tensorflow_federated as tff

from tff_quant import aggregators



from tff_quant.program import runtime


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


def test_parse_workers_validates_addresses():
  assert runtime.parse_workers('a:1, 127.0.0.1:8000') == ['a:1', '127.0.0.1:8000']
  for bad in ['a', ':80', 'host:0', 'host:x', 'host:70000', '']:
    with pytest.raises(ValueError, match='host:port'):
      runtime.parse_workers(bad)


def test_two_workers_give_exactly_the_single_process_result(tff_context):
  del tff_context
  factory = aggregators.rqm_factory(1.0, seed=7)
  values = [np.random.default_rng(i).uniform(-0.2, 0.2, 50).astype(np.float32)
            for i in range(6)]
  process = factory.create(tff.TensorType(np.float32, [50]))
  local = process.next(process.initialize(), values)
  addresses, procs = runtime.start_local_workers(2)
  try:
    remote = runtime.use_remote_workers(addresses)
    assert remote.addresses == addresses and not remote.unreachable()
    out = process.next(process.initialize(), values)
    # Client seeds depend on (seed, round, the client's own update) only, so the
    # split over two workers changes nothing: same levels, same decoded mean.
    np.testing.assert_array_equal(out['result'], local.result)
    assert out['measurements']['quantization']['num_clients'] == 6
  finally:
    runtime.stop_processes(procs)
    runtime.use_secure_sum_simulation()
  assert all(p.poll() is not None for p in procs)


def test_unreachable_worker_is_named():
  with pytest.raises(runtime.WorkerUnavailableError, match='127.0.0.1:1 is not reachable'):
    runtime.RemoteWorkers(['127.0.0.1:1'], ready_timeout_s=0.5)
  runtime.use_secure_sum_simulation()


def test_fedavg_rounds_on_two_workers_equal_the_single_process_rounds(tff_context):
  del tff_context
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tff_quant import models  # pylint: disable=g-import-not-at-top
  spec = (tf.TensorSpec([None, 6], tf.float32), tf.TensorSpec([None], tf.int32))

  model_fn = models.tff_model_fn(lambda: models.get('mlp', (6,), 3), spec,
                                 accuracy=False)

  process = tff.learning.algorithms.build_unweighted_fed_avg(
      model_fn, client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
      model_aggregator=aggregators.rqm_factory(1.0, seed=5))
  rng = np.random.default_rng(0)
  data = [tf.data.Dataset.from_tensor_slices(
      (rng.normal(size=(20, 6)).astype(np.float32),
       rng.integers(0, 3, 20).astype(np.int32))).batch(5) for _ in range(5)]
  start = process.initialize()

  def weights_after_two_rounds():
    state = start
    for _ in range(2):
      out = process.next(state, data)
      state = out['state'] if isinstance(out, dict) else out.state
    w = process.get_model_weights(state)
    return w['trainable'] if isinstance(w, dict) else w.trainable

  local = weights_after_two_rounds()
  addresses, procs = runtime.start_local_workers(2)
  try:
    runtime.use_remote_workers(addresses)
    remote = weights_after_two_rounds()
  finally:
    runtime.stop_processes(procs)
    runtime.use_secure_sum_simulation()
  # Same start, same client data, seeds from (seed, round, update): bit-identical.
  for a, b in zip(local, remote):
    np.testing.assert_array_equal(a, b)


_CHILD = '''
import numpy as np, tensorflow_federated as tff
from tff_quant import aggregators
from tff_quant.program import runtime
runtime.use_secure_sum_simulation()
process = aggregators.pbm_factory(1.0).create(tff.TensorType(np.float32, [3]))
process.next(process.initialize(), [np.zeros(3, np.float32)] * 2)
print(*runtime.worker_pids(), flush=True)
import time; time.sleep(600)
'''


def test_sigterm_ends_the_workers_it_started():
  """A run stopped with SIGTERM (what a scheduler or a parent script sends)
  leaves no worker_binary behind."""
  import subprocess, sys, signal, time  # pylint: disable=g-import-not-at-top,multiple-imports
  child = subprocess.Popen([sys.executable, '-c', _CHILD],
                           stdout=subprocess.PIPE, text=True)
  try:
    pids = [int(p) for p in child.stdout.readline().split()]
    assert pids, 'the child should have started a worker'
    child.send_signal(signal.SIGTERM)
    assert child.wait(timeout=60) == 128 + signal.SIGTERM
    deadline = time.time() + 10
    while time.time() < deadline and any(runtime._alive(p) for p in pids):  # pylint: disable=protected-access
      time.sleep(0.1)
    assert not any(runtime._alive(p) for p in pids)  # pylint: disable=protected-access
  finally:
    child.kill()
    child.wait()


_SWALLOWED = '''
import gc, os, signal, time
from tff_quant.program import runtime
runtime.exit_on_sigterm(grace_s=60)
fired = []
def signal_inside_gc(phase, info):
  if phase == 'start' and not fired:
    fired.append(1)
    os.kill(os.getpid(), signal.SIGTERM)
    for _ in range(1000):   # the handler's SystemExit is raised in this
      pass                  # loop (its backward jumps run handlers), ignored
gc.callbacks.append(signal_inside_gc)
print('ready', flush=True)
gc.collect()
time.sleep(30)
'''


def test_sigterm_swallowed_by_a_gc_callback_still_exits():
  """Python ignores a SystemExit raised inside a gc callback (as in jax's
  `_xla_gc_callback`); the signal is delivered again, well before the grace."""
  import subprocess, sys, signal, time  # pylint: disable=g-import-not-at-top,multiple-imports
  t0 = time.time()
  child = subprocess.run([sys.executable, '-c', _SWALLOWED], capture_output=True,
                         text=True, timeout=120, check=False)
  assert child.returncode == 128 + signal.SIGTERM, child.stderr
  assert 'Exception ignored' in child.stderr   # it was swallowed once
  assert time.time() - t0 < 25   # the 30 s sleep and the 60 s grace not waited


_STUBBORN = '''
import subprocess, sys, time
from tff_quant.program import runtime
runtime.exit_on_sigterm(grace_s=2)
sleeper = subprocess.Popen(['sleep', '600'], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
told = False
while True:
  try:   # code that will not stop
    if not told:
      print(sleeper.pid, flush=True)
      told = True
    time.sleep(60)
  except SystemExit:
    pass
'''


def test_sigterm_backstop_ends_children_and_exits_after_the_grace():
  import subprocess, sys, signal  # pylint: disable=g-import-not-at-top,multiple-imports
  child = subprocess.Popen([sys.executable, '-c', _STUBBORN],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
  sleeper = None
  try:
    sleeper = int(child.stdout.readline())
    child.send_signal(signal.SIGTERM)
    _, err = child.communicate(timeout=60)
    assert child.returncode == 128 + signal.SIGTERM, err
    assert 'did not finish in 2 s' in err
    assert not runtime._alive(sleeper)  # pylint: disable=protected-access
  finally:
    child.kill()
    child.wait()
    if sleeper is not None and runtime._alive(sleeper):  # pylint: disable=protected-access
      os.kill(sleeper, signal.SIGKILL)


def test_sigterm_grace_must_be_positive(monkeypatch):
  """Checked first, even where a handler is installed already."""
  import signal  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(runtime.signal, 'getsignal', lambda _: signal.SIG_IGN)
  with pytest.raises(ValueError, match='grace_s'):
    runtime.exit_on_sigterm(grace_s=0)


_TERM_AT_EXIT = '''
import atexit, os, signal, threading, time
from tff_quant.program import runtime
runtime.exit_on_sigterm(grace_s=30)
def last_hook():   # registered first: runs last, as `stop_workers` may
  time.sleep(0.5)
  print('last hook finished', flush=True)
atexit.register(last_hook)
def first_hook():   # a SIGTERM lands while it runs: Python ignores its exit
  threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGTERM)).start()
  time.sleep(0.5)
atexit.register(first_hook)
'''


def test_a_sigterm_during_exit_does_not_abort_the_later_exit_hooks():
  import subprocess, sys  # pylint: disable=g-import-not-at-top,multiple-imports
  out = subprocess.run([sys.executable, '-c', _TERM_AT_EXIT],
                       capture_output=True, text=True, timeout=60, check=False)
  assert 'last hook finished' in out.stdout, out.stderr


def test_the_backstop_exits_even_without_a_usable_stderr():
  """stderr a pipe whose reader is gone: the backstop's message fails, the
  exit does not."""
  import subprocess, sys, signal  # pylint: disable=g-import-not-at-top,multiple-imports
  code = _STUBBORN.replace(
      'runtime.exit_on_sigterm(grace_s=2)',
      'runtime.exit_on_sigterm(grace_s=1)\nimport os\nr, w = os.pipe()\n'
      'os.dup2(w, 2); os.close(r); os.close(w)')
  child = subprocess.Popen([sys.executable, '-c', code],
                           stdout=subprocess.PIPE, text=True)
  try:
    sleeper = int(child.stdout.readline())
    child.send_signal(signal.SIGTERM)
    assert child.wait(timeout=30) == 128 + signal.SIGTERM
    assert not runtime._alive(sleeper)  # pylint: disable=protected-access
  finally:
    child.kill()
    child.wait()
