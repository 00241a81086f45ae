"""A resumable loop over training rounds: checkpoint every round, one CSV row per round.

The one checkpointed loop: federated averaging, distributed SGD and the
experiments' settings all run their rounds here. A run directory holds config.json (a restart with other
settings is an error), checkpoints/ (tff.program.FileProgramStateManager) and
metrics.csv (tff.program.CSVFileReleaseManager keyed by round, so a row written
after the last checkpoint is replaced when the round is re-run).
"""

import asyncio
import json
import os
import shutil
import time
from typing import Callable, Dict, List, NamedTuple, Tuple

import tensorflow_federated as tff

from tff_quant.common import validation
from tff_quant.program import results_io
from tff_quant.program.errors import CorruptCheckpointError


class Rounds(NamedTuple):
  """What `run_rounds` returns: the final state, the CSV rows of rounds
  1..rounds, and the round the run resumed from (0 for a new run)."""
  state: object
  rows: List[Dict[str, str]]
  start: int


def load_checkpoint(manager, template, root):
  """(state, round) of the latest checkpoint, (None, 0) if none; corrupt -> error."""
  versions = asyncio.run(manager.get_versions())
  if not versions:
    return None, 0
  path = os.path.join(root, f'program_state_{max(versions)}')
  try:
    state, version = asyncio.run(manager.load_latest(template))
  except Exception as e:  # pylint: disable=broad-except
    raise CorruptCheckpointError(
        f'Checkpoint {path} cannot be read ({type(e).__name__}: {e}). Refusing to '
        'restart from round 0: delete that file to resume from the previous '
        'checkpoint, or pass --fresh to start over.') from e
  return state, version


def check_run_dir(run_dir: str, config: Dict, fresh: bool) -> None:
  """ValueError if run_dir holds a run with other settings (a larger 'rounds' is
  fine); nothing is written. With `fresh` any old run will be discarded."""
  cfg_path = os.path.join(run_dir, 'config.json')
  if fresh or not os.path.exists(cfg_path):
    return
  with open(cfg_path) as f:
    old = json.load(f)
  cfg = json.loads(json.dumps(config, default=float))
  diff = sorted(k for k in set(old) | set(cfg)
                if k != 'rounds' and old.get(k) != cfg.get(k))
  if diff:
    raise ValueError(
        f'{run_dir} holds a run with different settings ({", ".join(diff)}: '
        f'{[(old.get(k), cfg.get(k)) for k in diff]}). Use another '
        '--experiment_name / output directory, or --fresh to discard it.')


def prepare_run_dir(run_dir: str, config: Dict, fresh: bool) -> None:
  """Creates run_dir, or checks that the run already there used the same config."""
  check_run_dir(run_dir, config, fresh)
  if fresh and os.path.exists(run_dir):
    shutil.rmtree(run_dir)
  results_io.write_json(os.path.join(run_dir, 'config.json'), config)


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
  ckpt_root = os.path.join(run_dir, 'checkpoints')
  manager = tff.program.FileProgramStateManager(ckpt_root, keep_total=3)
  csv_path = os.path.join(run_dir, 'metrics.csv')
  metrics = tff.program.CSVFileReleaseManager(csv_path, key_fieldname='round')
  state, start = load_checkpoint(manager, initial_state, ckpt_root)
  if state is None:
    state = initial_state
  else:
    log(f'Resuming {run_dir} from round {start} (checkpoint program_state_{start}).')
  for rnd in range(start + 1, rounds + 1):
    t0 = time.time()
    state, row = step(state, rnd)
    row = dict(round=rnd, **row, seconds=time.time() - t0)
    asyncio.run(metrics.release(row, key=rnd))
    if rnd % checkpoint_every == 0 or rnd == rounds:
      asyncio.run(manager.save(state, rnd))
  rows = results_io.read_csv(csv_path) if os.path.exists(csv_path) else []
  return Rounds(state, [r for r in rows if int(r['round']) <= rounds], start)
