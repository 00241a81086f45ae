import os

import pytest

from tff_quant.program import results_io



from tff_quant.program import round_loop


def test_prepare_run_dir_refuses_other_settings_and_fresh_discards(tmp_path):
  run_dir = str(tmp_path / 'run')
  round_loop.prepare_run_dir(run_dir, {'lr': 0.1, 'rounds': 5}, fresh=False)
  round_loop.prepare_run_dir(run_dir, {'lr': 0.1, 'rounds': 9}, fresh=False)  # more rounds: ok
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
      raise KeyboardInterrupt  # killed during round 5
    return state + 1, {'value': float(state)}

  with pytest.raises(KeyboardInterrupt):
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
