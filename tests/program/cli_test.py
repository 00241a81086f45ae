import json
import os
import subprocess
import sys

import pytest

from tff_quant.program import cli, runtime

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize('error', [ValueError('bad --x'), FileNotFoundError('no data'),
                                   runtime.WorkerUnavailableError('worker a:1')])
def test_user_errors_exit_2_with_one_line(error, capsys):
  with pytest.raises(SystemExit) as e:
    with cli.user_errors_exit():
      raise error
  assert e.value.code == 2
  assert capsys.readouterr().err == f'error: {error}\n'


def test_other_errors_propagate():
  with pytest.raises(KeyError):
    with cli.user_errors_exit():
      raise KeyError('bug')


def test_secure_sum_simulation_stops_its_workers(tff_context):
  del tff_context
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tff_quant import aggregators  # pylint: disable=g-import-not-at-top
  with cli.secure_sum_simulation():
    process = aggregators.rqm_factory(1.0).create(tff.TensorType(np.float32, [3]))
    process.next(process.initialize(), [np.zeros(3, np.float32)] * 2)
    assert runtime.worker_pids()
  assert not runtime.worker_pids()
  runtime.use_secure_sum_simulation()


def test_check_flags_names_the_flag_and_the_range():
  cli.check_flags({'rounds': 1, 'lr': 0.1}, at_least_one=('rounds',), positive=('lr',))
  with pytest.raises(ValueError, match=r'--rounds must be in \[1, inf\), got 0'):
    cli.check_flags({'rounds': 0}, at_least_one=('rounds',))
  with pytest.raises(ValueError, match=r'--lr must be in \(0, inf\), got -1'):
    cli.check_flags(type('F', (), {'lr': -1})(), positive=('lr',))


_FORKS_AND_WAITS = '''
import multiprocessing, os, time
from tff_quant.program import cli

def work():
  time.sleep(600)

with cli.user_errors_exit():
  ctx = multiprocessing.get_context('fork')
  procs = [ctx.Process(target=work, daemon=daemon) for daemon in (True, False)]
  for p in procs:
    p.start()
  print(*[p.pid for p in procs], flush=True)
  time.sleep(600)
'''


def test_ctrl_c_is_one_line_and_exit_130_forked_children_included():
  """A terminal's Ctrl-C reaches the whole process group: the forked workers
  stay quiet, the parent prints one line, ends them and exits with 130."""
  import os, signal, subprocess, sys, time  # pylint: disable=g-import-not-at-top,multiple-imports
  child = subprocess.Popen([sys.executable, '-c', _FORKS_AND_WAITS],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, start_new_session=True)
  pids = []
  try:
    pids = [int(p) for p in child.stdout.readline().split()]
    assert len(pids) == 2
    time.sleep(1)   # the children past their start-up (which sets SIG_IGN)
    os.killpg(child.pid, signal.SIGINT)
    _, err = child.communicate(timeout=60)
  finally:
    child.kill()
    child.wait()
    for pid in pids:
      if runtime._alive(pid):  # pylint: disable=protected-access
        os.kill(pid, signal.SIGKILL)
  assert child.returncode == 130, err
  assert err == 'interrupted; rerun the same command to resume\n'
  deadline = time.time() + 10
  while time.time() < deadline and any(runtime._alive(p) for p in pids):  # pylint: disable=protected-access
    time.sleep(0.1)
  assert not any(runtime._alive(p) for p in pids)  # pylint: disable=protected-access


BINARIES = sorted(
    name[:-3] for name in os.listdir(os.path.join(ROOT, 'experiments'))
    if name.endswith('.py') and name != '__init__.py')

# In one process for every binary, one binary after the other, each as in a
# process of its own (absl's flags are global: a binary's flags are removed
# before the next one is imported; no binary imports another): --help exits
# 0; every integer flag must carry a lower bound, and each bad line — an
# unknown flag, an integer flag below its bound or not an integer — must
# exit 2 with one line naming the flag, before main runs. (One process pays
# TensorFlow's import once instead of once a binary.)
_BAD_FLAGS_DRIVER = r'''
import contextlib, importlib, io, json, sys, traceback
from absl import app, flags
from tff_quant.program import cli
app.define_help_flags()   # as app.run does before it parses
report = {}
for binary in sys.argv[1:]:
  try:
    module = importlib.import_module('experiments.' + binary)
  except Exception:  # pylint: disable=broad-except
    report[binary] = dict(error=traceback.format_exc())
    continue
  owned = list(flags.FLAGS.flags_by_module_dict().get(module.__name__, []))
  ints = [f for f in owned if f.flag_type() == 'int']
  cases = [('help', ['--help']), ('no_such_flag', ['--no_such_flag=1'])]
  for f in ints:
    cases.append((f.name, ['--%s=x' % f.name]))
    bound = getattr(f.parser, 'lower_bound', None)
    if bound is not None:
      cases.append((f.name, ['--%s=%d' % (f.name, bound - 1)]))
  out = dict(unbounded=[f.name for f in ints
                        if getattr(f.parser, 'lower_bound', None) is None],
             results=[])
  for name, argv in cases:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
      try:
        cli.parse_flags(['prog'] + argv)
        code = 0
      except SystemExit as e:
        code = e.code
    flags.FLAGS.unparse_flags()
    out['results'].append([name, argv, code, err.getvalue()])
  report[binary] = out
  for f in owned:   # the next binary starts without them, as in its own process
    delattr(flags.FLAGS, f.name)
print('RESULT ' + json.dumps(report))
'''


@pytest.fixture(scope='module')
def bad_flag_results():
  """{binary: its driver results} for every binary, from one process."""
  res = subprocess.run([sys.executable, '-c', _BAD_FLAGS_DRIVER, *BINARIES],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
  assert res.returncode == 0, res.stderr[-3000:]
  return json.loads(res.stdout.split('RESULT ', 1)[1])


@pytest.mark.parametrize('binary', BINARIES)
def test_bad_flags_of_every_binary_exit_2_with_one_line_naming_the_flag(
    binary, bad_flag_results):
  out = bad_flag_results[binary]
  assert 'error' not in out, out.get('error')
  assert out['unbounded'] == [], (
      f'{binary}: integer flags without a lower bound: {out["unbounded"]}')
  assert out['results'], binary
  (_, _, code, err), *bad = out['results']
  assert code == 0 and err == '', (binary, '--help exits 0', code, err)
  for name, argv, code, err in bad:
    assert code == 2, (binary, argv, code, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith('error: '), (binary, argv, err)
    assert name in lines[0], (binary, argv, err)


_CHECKED_BINARY = r'''
import sys
from absl import flags
from tff_quant.program import cli
flags.DEFINE_integer('rounds', 1, 'Rounds.')
flags.DEFINE_bool('term_in_check', False, 'SIGTERM this process in check().')

def check():
  if flags.FLAGS.term_in_check:
    import os, signal, time
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(30)
  if flags.FLAGS.rounds < 1:
    raise ValueError(f'--rounds must be >= 1, got {flags.FLAGS.rounds} '
                     f'(tensorflow loaded: {"tensorflow" in sys.modules})')

def main(argv):
  import tensorflow as tf  # already imported by cli.run: Keras builds eagerly
  layer = tf.keras.Sequential([tf.keras.layers.Flatten(input_shape=(2, 2))])
  print('ran', 'tensorflow' in sys.modules, tuple(layer(tf.zeros([1, 2, 2])).shape))

cli.run(main, check=check)
'''


@pytest.mark.parametrize('args, code, out, err', [
    (['--rounds=0'], 2, '',
     'error: --rounds must be >= 1, got 0 (tensorflow loaded: False)\n'),
    (['--rounds=x'], 2, '', None),
    (['--rounds=3'], 0, 'ran True (1, 4)\n', None),
    (['--term_in_check'], 143, '', ''),   # SystemExit(128 + 15), not -15
    (['--help'], 0, None, None)])
def test_run_checks_before_tensorflow_and_keras_still_builds(args, code, out, err):
  """`cli.run(main, check=)`: a refusal is one line, status 2, before
  TensorFlow starts (the check reports it is not loaded);
  a good command imports TensorFlow before app.run, so Keras builds a
  Flatten(input_shape=...) (imported inside app.run it fails in TF 2.14)."""
  res = subprocess.run([sys.executable, '-c', _CHECKED_BINARY, *args], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
  assert res.returncode == code, res.stderr[-2000:]
  if out is not None:
    assert res.stdout == out
  else:   # the help: absl's, with the flag
    assert '--rounds' in res.stdout + res.stderr
  if err is not None:
    assert res.stderr == err


def test_run_without_tensorflow_starts_main_without_it():
  """`cli.run(main, check=, tensorflow=False)`: a binary whose own process
  builds no Keras model (experiments/fl_table.py) checks and runs main
  without importing TensorFlow."""
  source = _CHECKED_BINARY.replace(
      'cli.run(main, check=check)',
      'cli.run(lambda argv: print("ran", "tensorflow" in sys.modules), '
      'check=check, tensorflow=False)')
  res = subprocess.run([sys.executable, '-c', source, '--rounds=3'], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
  assert res.returncode == 0, res.stderr[-2000:]
  assert res.stdout == 'ran False\n'
