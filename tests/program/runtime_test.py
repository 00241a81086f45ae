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


def test_workers_started_by_a_process_that_ignores_sigint_can_be_stopped(
    tff_context):
  """A background job ignores SIGINT and its children inherit that; TFF
  stops its workers with SIGINT and waits. The context gives SIGINT its
  default back, so a worker started after it does not ignore SIGINT (read
  from the kernel: /proc/<pid>/status, SigIgn, bit 2 - 1)."""
  del tff_context
  import signal  # pylint: disable=g-import-not-at-top
  old = signal.signal(signal.SIGINT, signal.SIG_IGN)
  try:
    runtime.stop_workers()
    runtime.use_secure_sum_simulation()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    process = aggregators.pbm_factory(1.0).create(
        tff.TensorType(np.float32, [3]))
    process.next(process.initialize(), [np.zeros(3, np.float32)] * 2)
    pids = runtime.worker_pids()
    assert pids
    for pid in pids:
      with open(f'/proc/{pid}/status') as f:
        ignored = next(int(line.split()[1], 16) for line in f
                       if line.startswith('SigIgn:'))
      assert not ignored & (1 << (signal.SIGINT - 1)), pid
  finally:
    signal.signal(signal.SIGINT, old)


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


def test_a_failed_checks_message_is_kept_whole():
  """TF writes `assertion failed: [message] [datum] ...`; a message with
  brackets of its own ("levels in [0, 15]", "[1, inf)") is not cut."""
  grpc_text = (
      '<_InactiveRpcError of RPC that terminated with:\n\tstatus = StatusCode.'
      'INTERNAL\n\tdetails = "Failed to run computation: assertion failed: '
      '[More clients in this round than max_clients_per_round=2: the int32 '
      'secure sum of levels in [0, 15] could overflow.] [Condition x <= y did '
      'not hold element-wise:] [x (strided_slice:0) = ] [3] [y (assert_less_'
      'equal/y:0) = ] [2]\n\t [[{{node assert_less_equal/Assert/Assert}}]]"')
  assert runtime.assertion_message(grpc_text) == (
      'More clients in this round than max_clients_per_round=2: the int32 '
      'secure sum of levels in [0, 15] could overflow.')
  assert runtime.assertion_message(
      'assertion failed: [x must be in [1, inf), got 0]\n\t [[{{node a}}]]'
  ) == 'x must be in [1, inf), got 0'
  assert runtime.assertion_message('assertion failed: [x] [y]') == 'x'
  assert runtime.assertion_message('INVALID_ARGUMENT: other') is None


def test_round_check_error_carries_the_whole_message(tff_context):
  del tff_context
  process = aggregators.pbm_factory(1.0, max_clients_per_round=2).create(
      tff.TensorType(np.float32, [3]))
  with pytest.raises(runtime.RoundCheckError) as e:
    with runtime.readable_round_errors():
      process.next(process.initialize(), [np.zeros(3, np.float32)] * 3)
  message = str(e.value)
  assert message.startswith('More clients in this round than '
                            'max_clients_per_round=2: the int32 secure sum of '
                            'levels in [0, ')
  assert message.endswith('] could overflow.'), message
  assert '\n' not in message and 'Condition' not in message


_NO_SECURE_SUM_CONTEXT = '''
import atexit
def report():   # registered before runtime's exit hook: runs after it
  from tff_quant.program import runtime
  print('left:', *runtime.worker_pids(), flush=True)
atexit.register(report)
import numpy as np, tensorflow_federated as tff
from tff_quant import aggregators
from tff_quant.program import runtime
process = aggregators.rqm_factory(1.0).create(tff.TensorType(np.float32, [3]))
try:
  with runtime.readable_round_errors():
    process.next(process.initialize(), [np.zeros(3, np.float32)] * 2)
finally:
  print('started:', *runtime.worker_pids(), flush=True)
'''


def test_a_missing_secure_sum_context_is_one_line_naming_the_call(tmp_path):
  """TFF's default context (what a script gets without
  `use_secure_sum_simulation()`): a one-line error that names the call, none
  of TFF's 1,500-character error, and its worker ends with the script."""
  import subprocess, sys  # pylint: disable=g-import-not-at-top,multiple-imports
  with open(tmp_path / 'out', 'w') as out, open(tmp_path / 'err', 'w') as err:
    # Files, not pipes: a worker that outlived the script would hold a pipe.
    child = subprocess.run([sys.executable, '-c', _NO_SECURE_SUM_CONTEXT],
                           stdout=out, stderr=err, timeout=300, check=False)
  stdout = (tmp_path / 'out').read_text()
  stderr = (tmp_path / 'err').read_text()
  started = [int(p) for p in stdout.split('started:')[1].split('\n')[0].split()]
  try:
    assert child.returncode == 1
    last = stderr.strip().splitlines()[-1]
    assert last.startswith('tff_quant.program.runtime.SecureSumContextError: ')
    assert ('call tff_quant.program.runtime.use_secure_sum_simulation() before '
            'building and running the process.') in last
    assert 'INVALID_ARGUMENT' not in stderr and stderr.count('Cannot embed') == 1
    assert len(stderr.strip().splitlines()) < 15, stderr
    assert 'Exception ignored' not in stderr
    assert started, 'TFF\'s default context should have started a worker'
    assert stdout.strip().endswith('left:'), stdout   # ended by the exit hook
    assert not any(runtime._alive(p) for p in started)  # pylint: disable=protected-access
  finally:
    for pid in started:
      if runtime._alive(pid):  # pylint: disable=protected-access
        os.kill(pid, 9)


_DEFAULT_CONTEXT_RUN = '''
import numpy as np, tensorflow_federated as tff
from tensorflow_federated.python.core.impl.context_stack import context_stack_impl
from tff_quant.program import runtime

@tff.tensorflow.computation(np.float32)
def double(x):
  return x * 2.0

print(double(np.float32(2.0)), *runtime.worker_pids(), flush=True)
# Held by __main__ until interpreter shutdown: TFF's own __del__ would end
# the worker only then, if at all.
context = context_stack_impl.context_stack.current
'''


def test_the_exit_hook_ends_the_default_contexts_worker_quietly(tmp_path):
  import subprocess, sys  # pylint: disable=g-import-not-at-top,multiple-imports
  with open(tmp_path / 'out', 'w') as out, open(tmp_path / 'err', 'w') as err:
    child = subprocess.run([sys.executable, '-c', _DEFAULT_CONTEXT_RUN],
                           stdout=out, stderr=err, timeout=300, check=False)
  value, *pids = (tmp_path / 'out').read_text().split()
  stderr = (tmp_path / 'err').read_text()
  try:
    assert child.returncode == 0, stderr
    assert float(value) == 4.0 and pids
    assert 'Exception ignored' not in stderr, stderr
    assert not any(runtime._alive(int(p)) for p in pids)  # pylint: disable=protected-access
  finally:
    for pid in pids:
      if runtime._alive(int(pid)):  # pylint: disable=protected-access
        os.kill(int(pid), 9)


def test_stop_workers_and_end_tff_leave_the_context_usable(tff_context):
  """The context's ServiceManager forgets the worker ended under it: the next
  computation starts another (and TFF's __del__ does not signal the ended
  one: "Exception ignored ... ProcessLookupError")."""
  del tff_context
  process = aggregators.pbm_factory(1.0).create(tff.TensorType(np.float32, [3]))
  for stop in (runtime.stop_workers, runtime.end_tff):
    process.next(process.initialize(), [np.zeros(3, np.float32)] * 2)
    assert runtime.worker_pids()
    stop()
    assert not runtime.worker_pids()
    _, managers = runtime._tff_objects()  # pylint: disable=protected-access
    assert all(m.__dict__['_process'] is None for m in managers)
  out = process.next(process.initialize(), [np.zeros(3, np.float32)] * 2)
  assert out.measurements['quantization']['num_clients'] == 2
  assert runtime.stop_computations()   # nothing in flight: every loop answers


BINARIES = ('bq_sgd', 'fl_emnist', 'fl_table', 'privacy_curves',
            'privacy_frontier', 'qgauss_mia', 'qmgeo_mnist', 'rqp_sgd')


@pytest.mark.parametrize('binary', BINARIES)
def test_every_binary_exits_cleanly_after_a_bad_flag(binary):
  """No "Exception ignored in ... ServiceManager.__del__" and no traceback at
  exit (TFF's import-time context, torn down after `subprocess`): runtime's
  exit hook, registered when the binaries import it. (--help leaves through
  the same exit; tests/program/cli_test.py parses every binary's help and
  bad flags in process.)"""
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  root = os.path.dirname(os.path.dirname(os.path.dirname(
      os.path.abspath(__file__))))
  res = subprocess.run([sys.executable, '-m', f'experiments.{binary}',
                        '--no_such_flag'],
                       cwd=root, capture_output=True, text=True, timeout=300)
  assert res.returncode == 2, res.stderr[-2000:]   # one line, exit 2
  assert 'Exception ignored' not in res.stderr, res.stderr[-2000:]
  assert 'Traceback' not in res.stderr, res.stderr[-2000:]
