import json
import os

import pytest

from tff_quant.program import results_io
from tff_quant.program import round_loop
from tff_quant.program import runtime


def test_prepare_run_dir_refuses_other_settings_and_fresh_discards(tmp_path):
  run_dir = str(tmp_path / 'run')
  round_loop.prepare_run_dir(run_dir, {'lr': 0.1, 'rounds': 5}, fresh=False)
  round_loop.prepare_run_dir(run_dir, {'lr': 0.1, 'rounds': 9}, fresh=False)  # more rounds: ok
  os.makedirs(os.path.join(run_dir, 'checkpoints', 'program_state_1'))  # a round done
  with pytest.raises(ValueError, match='lr'):
    round_loop.prepare_run_dir(run_dir, {'lr': 0.2, 'rounds': 5}, fresh=False)
  open(os.path.join(run_dir, 'marker'), 'w').close()
  round_loop.prepare_run_dir(run_dir, {'lr': 0.2, 'rounds': 5}, fresh=True)
  assert not os.path.exists(os.path.join(run_dir, 'marker'))


def test_run_rounds_checkpoints_resumes_and_rejects_corrupt_state(tmp_path):
  import numpy as np  # pylint: disable=g-import-not-at-top
  calls = []

  def step(state, rnd):
    calls.append(rnd)
    return state + 1, {'value': float(state)}

  state, rows, _ = round_loop.run_rounds(np.int32(0), 3, str(tmp_path), step,
                                      log=lambda s: None)
  assert int(state) == 3 and [int(r['round']) for r in rows] == [1, 2, 3]
  state, rows, _ = round_loop.run_rounds(np.int32(0), 5, str(tmp_path), step,
                                      log=lambda s: None)
  assert calls == [1, 2, 3, 4, 5] and int(state) == 5 and len(rows) == 5
  # A damaged latest checkpoint is an error naming it, not a restart.
  ckpt = tmp_path / 'checkpoints' / 'program_state_5'
  for root, _, files in os.walk(ckpt):
    for f in files:
      with open(os.path.join(root, f), 'w') as fh:
        fh.write('garbage')
  with pytest.raises(round_loop.CorruptCheckpointError, match='program_state_5'):
    round_loop.run_rounds(np.int32(0), 6, str(tmp_path), step, log=lambda s: None)
  assert len(results_io.read_csv(str(tmp_path / 'metrics.csv'))) == 5


def test_sparse_checkpoints_rerun_the_rounds_after_the_last_one(tmp_path):
  import numpy as np  # pylint: disable=g-import-not-at-top
  calls = []

  def step(state, rnd):
    calls.append(rnd)
    if rnd == 5 and calls.count(5) == 1:
      raise RuntimeError('killed')  # the process died during round 5
    return state + 1, {'value': float(state)}

  with pytest.raises(RuntimeError, match='killed'):
    round_loop.run_rounds(np.int32(0), 6, str(tmp_path), step, lambda s: None,
                          checkpoint_every=3)
  state, rows, _ = round_loop.run_rounds(np.int32(0), 6, str(tmp_path), step,
                                      lambda s: None, checkpoint_every=3)
  # Round 4 ran after the checkpoint of round 3, so it runs again; one row each.
  assert calls == [1, 2, 3, 4, 5, 4, 5, 6]
  assert int(state) == 6 and [int(r['round']) for r in rows] == [1, 2, 3, 4, 5, 6]
  with pytest.raises(ValueError, match='checkpoint_every'):
    round_loop.run_rounds(np.int32(0), 6, str(tmp_path), step, checkpoint_every=0)


def test_a_second_run_on_the_same_directory_is_refused(tmp_path):
  import numpy as np  # pylint: disable=g-import-not-at-top
  step = lambda s, r: (s + 1, {'x': float(r)})
  with results_io.exclusive(str(tmp_path), 'training run'):
    with pytest.raises(ValueError, match='Another training run is writing'):
      round_loop.run_rounds(np.int32(0), 2, str(tmp_path), step, log=lambda s: None)
  assert not (tmp_path / 'metrics.csv').exists()
  state, rows, _ = round_loop.run_rounds(np.int32(0), 2, str(tmp_path), step,
                                         log=lambda s: None)
  assert int(state) == 2 and len(rows) == 2


def test_ctrl_c_checkpoints_the_last_finished_round_and_names_the_round(tmp_path):
  """Ctrl-C in round 5 with checkpoints every 3 rounds: round 4 is saved at
  once, so the rerun starts at round 5; the error's text is the one line a
  binary prints."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  calls = []

  def step(state, rnd):
    calls.append(rnd)
    if rnd == 5 and calls.count(5) == 1:
      raise KeyboardInterrupt
    return state + 1, {'value': float(state)}

  with pytest.raises(runtime.Interrupted) as e:
    round_loop.run_rounds(np.int32(0), 6, str(tmp_path), step, lambda s: None,
                          checkpoint_every=3)
  assert str(e.value) == ('interrupted at round 5; rerun the same command to '
                          'resume from round 5')
  assert isinstance(e.value, KeyboardInterrupt)
  assert round_loop.checkpointed_rounds(str(tmp_path)) == [3, 4]
  logs = []
  state, rows, start = round_loop.run_rounds(np.int32(0), 6, str(tmp_path), step,
                                             logs.append, checkpoint_every=3)
  assert start == 4 and 'from round 4' in logs[0]
  assert calls == [1, 2, 3, 4, 5, 5, 6]
  assert int(state) == 6 and [int(r['round']) for r in rows] == [1, 2, 3, 4, 5, 6]


def test_ctrl_c_in_round_1_resumes_from_round_1(tmp_path):
  import numpy as np  # pylint: disable=g-import-not-at-top

  def step(state, rnd):
    raise KeyboardInterrupt

  with pytest.raises(runtime.Interrupted, match='round 1; .* from round 1$'):
    round_loop.run_rounds(np.int32(0), 3, str(tmp_path), step, lambda s: None)
  assert not round_loop.checkpointed_rounds(str(tmp_path))


def test_a_run_that_never_checkpointed_a_round_takes_a_new_config(tmp_path):
  """A start that failed before round 1 (a dead worker, a failed
  calibration) does not block the corrected retry; one line says so."""
  run_dir = str(tmp_path / 'run')
  round_loop.prepare_run_dir(run_dir, {'lr': 0.1, 'rounds': 5}, fresh=False)
  with open(os.path.join(run_dir, 'metrics.csv'), 'w') as f:
    f.write('round,value\n1,0.5\n')   # a round that ran, never checkpointed
  logs = []
  round_loop.prepare_run_dir(run_dir, {'lr': 0.2, 'rounds': 5}, fresh=False,
                             log=logs.append)
  assert len(logs) == 1 and 'never checkpointed a round; replaced' in logs[0]
  assert 'lr' in logs[0] and run_dir in logs[0]
  with open(os.path.join(run_dir, 'config.json')) as f:
    assert json.load(f) == {'lr': 0.2, 'rounds': 5}
  assert not os.path.exists(os.path.join(run_dir, 'metrics.csv'))
  round_loop.prepare_run_dir(run_dir, {'lr': 0.2, 'rounds': 5}, fresh=False,
                             log=logs.append)
  assert len(logs) == 1   # same config: nothing to say


def test_a_run_with_a_checkpoint_or_a_summary_still_refuses_a_new_config(tmp_path):
  import numpy as np  # pylint: disable=g-import-not-at-top
  run_dir = str(tmp_path / 'run')
  round_loop.prepare_run_dir(run_dir, {'lr': 0.1, 'rounds': 2}, fresh=False)
  round_loop.run_rounds(np.int32(0), 1, run_dir,
                        lambda s, r: (s + 1, {'x': 1.0}), log=lambda s: None)
  assert round_loop.checkpointed_rounds(run_dir) == [1]
  with pytest.raises(ValueError, match='lr'):
    round_loop.prepare_run_dir(run_dir, {'lr': 0.2, 'rounds': 2}, fresh=False)
  finished = str(tmp_path / 'finished')   # a run that keeps no checkpoints
  round_loop.prepare_run_dir(finished, {'lr': 0.1}, fresh=False)
  results_io.write_json(os.path.join(finished, 'summary.json'), {'acc': 1.0})
  with pytest.raises(ValueError, match='lr'):
    round_loop.check_run_dir(finished, {'lr': 0.2}, fresh=False)
  with open(os.path.join(run_dir, 'config.json')) as f:
    assert json.load(f)['lr'] == 0.1   # nothing overwritten


def test_a_new_config_is_refused_while_the_old_run_is_going(tmp_path):
  """Not started yet means no checkpoint: but a run that holds the folder
  (before its first checkpoint) keeps its config."""
  run_dir = str(tmp_path / 'run')
  round_loop.prepare_run_dir(run_dir, {'lr': 0.1}, fresh=False)
  with results_io.exclusive(run_dir, 'training run'):
    with pytest.raises(ValueError, match='Another training run is writing'):
      round_loop.prepare_run_dir(run_dir, {'lr': 0.2}, fresh=False,
                                 log=lambda s: None)
  with open(os.path.join(run_dir, 'config.json')) as f:
    assert json.load(f) == {'lr': 0.1}
