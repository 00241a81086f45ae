"""A resumable loop over training rounds: checkpoint every round, one CSV row per round.

The one checkpointed loop: federated averaging, distributed SGD and the
experiments' settings all run their rounds here. A run directory holds config.json (a restart with other
settings is an error), checkpoints/ (tff.program.FileProgramStateManager) and
metrics.csv (tff.program.CSVFileReleaseManager keyed by round, so a row written
after the last checkpoint is replaced when the round is re-run). A run folder
whose run never checkpointed a round (and has no summary.json) takes a new
config: a failed start needs no --fresh.

Ctrl-C during a round checkpoints the last finished round (if it was not) and
raises `runtime.Interrupted` naming the round: the same command resumes there.
"""

import asyncio
import json
import os
import shutil
import signal
import threading
import time
from typing import Callable, Dict, List, NamedTuple, Sequence, Tuple

from tff_quant.common import validation
from tff_quant.program import results_io
from tff_quant.program import runtime
from tff_quant.program.errors import CorruptCheckpointError


class Rounds(NamedTuple):
  """What `run_rounds` returns: the final state, the CSV rows of rounds
  1..rounds, and the round the run resumed from (0 for a new run)."""
  state: object
  rows: List[Dict[str, str]]
  start: int


def _run(coroutine, ctrl_c: str = 'after'):
  """asyncio.run(coroutine) with Ctrl-C held back until it returns.

  Ctrl-C inside asyncio.run can land while it builds its event loop (Python
  then reports the half-built loop at exit) or before the coroutine starts
  (reported as never awaited); a save or a CSV row takes a second or so.

  Args:
    coroutine: what to run.
    ctrl_c: 'after' (KeyboardInterrupt once it returns) or 'ignore'.

  Returns:
    What the coroutine returns.
  """
  held = []
  previous = None
  if (threading.current_thread() is threading.main_thread() and
      signal.getsignal(signal.SIGINT) is signal.default_int_handler):
    previous = signal.signal(signal.SIGINT, lambda *_: held.append(1))
  try:
    return asyncio.run(coroutine)
  finally:
    coroutine.close()   # a no-op once it ran
    if previous is not None:
      signal.signal(signal.SIGINT, previous)
      if held and ctrl_c == 'after':
        raise KeyboardInterrupt


def load_checkpoint(manager, template, root):
  """(state, round) of the latest checkpoint, (None, 0) if none; corrupt -> error."""
  versions = _run(manager.get_versions())
  if not versions:
    return None, 0
  path = os.path.join(root, f'program_state_{max(versions)}')
  try:
    state, version = _run(manager.load_latest(template))
  except Exception as e:  # pylint: disable=broad-except
    raise CorruptCheckpointError(
        f'Checkpoint {path} cannot be read ({type(e).__name__}: {e}). Refusing to '
        'restart from round 0: delete that file to resume from the previous '
        'checkpoint, or pass --fresh to start over.') from e
  return state, version


def config_diff(run_dir: str, config: Dict, ignore: Sequence[str] = ('rounds',)
                ) -> Tuple[Dict, List[str]]:
  """(the config run_dir holds, the keys outside `ignore` where `config`
  differs); ({}, []) if run_dir holds none.

  Args:
    run_dir: the run's folder (its config.json).
    config: what defines the run now (JSON-able; floats via float()).
    ignore: keys not compared (by default 'rounds': more rounds resume).
  """
  cfg_path = os.path.join(run_dir, 'config.json')
  if not os.path.exists(cfg_path):
    return {}, []
  with open(cfg_path) as f:
    old = json.load(f)
  cfg = json.loads(json.dumps(config, default=float))
  return old, sorted(k for k in set(old) | set(cfg)
                     if k not in ignore and old.get(k) != cfg.get(k))


def checkpointed_rounds(run_dir: str) -> List[int]:
  """The rounds whose state run_dir's checkpoints/ holds (FileProgramStateManager's
  program_state_<round> folders; the temporary folders of a save cut short are
  not counted)."""
  ckpt_root = os.path.join(run_dir, 'checkpoints')
  if not os.path.isdir(ckpt_root):
    return []
  prefix = 'program_state_'
  return sorted(int(name[len(prefix):]) for name in os.listdir(ckpt_root)
                if name.startswith(prefix) and name[len(prefix):].isdigit())


def run_started(run_dir: str) -> bool:
  """Whether run_dir holds work of its run: a checkpointed round, or the
  summary.json of a finished run (a run without checkpoints)."""
  return bool(checkpointed_rounds(run_dir)) or os.path.exists(
      os.path.join(run_dir, 'summary.json'))


def check_run_dir(run_dir: str, config: Dict, fresh: bool) -> None:
  """ValueError if run_dir holds a run with other settings (a larger 'rounds' is
  fine) that got anywhere (`run_started`); nothing is written. A run that
  never checkpointed a round takes the new settings (`prepare_run_dir`); with
  `fresh` any old run will be discarded.

  Raises:
    ValueError: run_dir holds a started run with other settings.
  """
  if fresh:
    return
  old, diff = config_diff(run_dir, config)
  if diff and run_started(run_dir):
    cfg = json.loads(json.dumps(config, default=float))
    raise ValueError(
        f'{run_dir} holds a run with different settings ({", ".join(diff)}: '
        f'{[(old.get(k), cfg.get(k)) for k in diff]}). Use another '
        '--experiment_name / output directory, or --fresh to discard it.')


def prepare_run_dir(run_dir: str, config: Dict, fresh: bool,
                    log: Callable[[str], None] = print) -> None:
  """Creates run_dir, or checks that the run already there used the same config.

  A run there that never checkpointed a round (its worker died before round
  1, its calibration failed) is replaced: its config.json is overwritten and
  its metrics.csv (rows of unsaved rounds of the old settings) removed, said
  in one line to `log`.

  Args:
    run_dir: the run's folder.
    config: what defines the run (JSON-able; floats via float()).
    fresh: discard whatever run_dir holds first.
    log: where the line about a replaced config goes.

  Raises:
    ValueError: run_dir holds a started run with other settings
      (`check_run_dir`), or a run is writing there now.
  """
  check_run_dir(run_dir, config, fresh)
  if fresh and os.path.exists(run_dir):
    shutil.rmtree(run_dir)
  _, diff = config_diff(run_dir, config)
  if not diff:
    results_io.write_json(os.path.join(run_dir, 'config.json'), config)
    return
  # `check_run_dir` passed: no round of that run was checkpointed. Unless it
  # is running now (before its first checkpoint): then the lock refuses.
  with results_io.exclusive(run_dir, 'training run'):
    metrics = os.path.join(run_dir, 'metrics.csv')
    if os.path.exists(metrics):
      os.remove(metrics)
    results_io.write_json(os.path.join(run_dir, 'config.json'), config)
  log(f'{run_dir}: its run never checkpointed a round; replaced its '
      f'config.json with the new settings ({", ".join(diff)} changed).')


def run_rounds(initial_state, rounds: int, run_dir: str,
               step: Callable[[object, int], Tuple[object, Dict]],
               log: Callable[[str], None] = print, checkpoint_every: int = 1):
  """Runs rounds start+1..rounds of `step(state, round) -> (state, row)`, resuming.

  Returns `Rounds(state, rows so far, start)`. `row` is a flat dict of numbers written to
  metrics.csv after every round; the state is checkpointed every
  `checkpoint_every` rounds and after the last (a resumed run re-runs the rounds
  after its last checkpoint and replaces their rows).
  """
  validation.check_integer('checkpoint_every', checkpoint_every, 1)
  with results_io.exclusive(run_dir, 'training run'):
    return _run_rounds(initial_state, rounds, run_dir, step, log,
                       checkpoint_every)


def _run_rounds(initial_state, rounds, run_dir, step, log, checkpoint_every):
  """`run_rounds` under its directory lock."""
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  ckpt_root = os.path.join(run_dir, 'checkpoints')
  manager = tff.program.FileProgramStateManager(ckpt_root, keep_total=3)
  csv_path = os.path.join(run_dir, 'metrics.csv')
  metrics = tff.program.CSVFileReleaseManager(csv_path, key_fieldname='round')
  state, start = load_checkpoint(manager, initial_state, ckpt_root)
  if state is None:
    state = initial_state
  else:
    log(f'Resuming {run_dir} from round {start} (checkpoint program_state_{start}).')
  done, saved, rnd = start, start, start   # `state` is round `done`'s
  try:
    for rnd in range(start + 1, rounds + 1):
      t0 = time.time()
      new_state, row = step(state, rnd)
      row = dict(round=rnd, **row, seconds=time.time() - t0)
      _run(metrics.release(row, key=rnd))
      state, done = new_state, rnd
      if rnd % checkpoint_every == 0 or rnd == rounds:
        _run(manager.save(state, rnd))
        saved = rnd
  except KeyboardInterrupt:
    saved = _save_at_interrupt(manager, state, done, saved, log)
    raise runtime.Interrupted(
        f'interrupted at round {rnd}; rerun the same command to resume from '
        f'round {saved + 1}') from None
  rows = results_io.read_csv(csv_path) if os.path.exists(csv_path) else []
  return Rounds(state, [r for r in rows if int(r['round']) <= rounds], start)


def _save_at_interrupt(manager, state, done: int, saved: int, log) -> int:
  """After Ctrl-C: checkpoints `state`, round `done`'s, unless a checkpoint
  holds it already (sparse checkpoints, or Ctrl-C during the round's own
  save); returns the last round checkpointed. The computations the round left
  running in TFF's threads are cancelled first."""
  runtime.stop_computations()
  try:
    versions = _run(manager.get_versions(), 'ignore') or []
    if done <= saved or done in versions:
      return done if done in versions else saved
    _run(manager.save(state, done), 'ignore')   # Ctrl-C again: already exiting
    return done
  except (Exception, KeyboardInterrupt) as e:  # pylint: disable=broad-except
    log(f'Could not checkpoint round {done} after Ctrl-C ({type(e).__name__}'
        f'{": " + str(e) if str(e) else ""}); the last checkpoint is round '
        f'{saved}.')
    return saved
