"""Tests for tff_quant.training.tuning_settings: the grid's order and names,
the clip of a point, and the settings' checks (named errors, no TensorFlow)."""

import json
import subprocess
import sys

import pytest

from tff_quant.training import tuning_settings


def test_grid_interleaves_epsilons_and_puts_the_median_clip_first():
  points = tuning_settings.grid([3, 10], [0.05, 0.2], [0, 0.9], [0.5, 1, 2])
  assert len(points) == 24 and len(set(points)) == 24
  assert [p.epsilon for p in points[:4]] == [3, 10, 3, 10]
  assert all(p.clip_multiple == 1 for p in points[:8])
  assert points[0] == tuning_settings.Point(3.0, 0.05, 0.0, 1.0)   # the simplest
  assert points[0].name == 'eps3_lr0.05_mom0_clip1x'
  assert tuning_settings.Point(3, 0.05, 0, 1, 2.0).name.endswith('_slr2')
  with pytest.raises(ValueError, match='server_momenta'):
    tuning_settings.grid([3], [0.1], [1.0], [1])
  with pytest.raises(ValueError, match='server_lr_schedules'):
    tuning_settings.grid([3], [0.1], [0], [1], [1.0], ['linear'])
  with pytest.raises(ValueError, match='empty'):
    tuning_settings.grid([3], [], [0], [1])


def test_a_point_is_read_back_from_its_name():
  for p in tuning_settings.grid([3, 10], [0.05, 0.2], [0, 0.9], [0.5, 1, 2], [1, 0.1],
                       ['constant', 'cosine']):
    assert tuning_settings.Point.from_name(p.name) == p
  assert tuning_settings.Point(3, 0.2, 0, 1, 1, 'cosine').name == (
      'eps3_lr0.2_mom0_clip1x_cosine')
  with pytest.raises(ValueError, match='schedules'):
    tuning_settings.grid([3], [0.1], [0], [1], [1], ['linear'])
  assert tuning_settings.Point.from_name('noise_free_lr0.05') is None


def test_clip_norm_is_the_multiple_of_the_median_at_its_lr():
  medians = {0.05: 0.1234, 0.2: 0.5}
  assert tuning_settings.Point(3, 0.05, 0, 2).clip_norm(medians) == 0.247
  assert tuning_settings.Point(3, 0.2, 0.9, 0.5).clip_norm(medians) == 0.25


def test_settings_check_names_the_bad_value(tmp_path):
  with pytest.raises(ValueError, match='max_runs'):
    tuning_settings.Settings(output_dir=str(tmp_path), max_runs=0).check()
  with pytest.raises(ValueError, match='deadline'):
    tuning_settings.Settings(output_dir=str(tmp_path), deadline='25:00').check()
  with pytest.raises(ValueError, match='client_lrs'):
    tuning_settings.Settings(output_dir=str(tmp_path), client_lrs=()).check()


def test_settings_share_training_configs_fields_and_config_builds_one():
  s = tuning_settings.Settings('out', rounds=7)
  assert s.training()['rounds'] == 7
  assert s.training()['delta'] == 1 / s.total_clients
  c = s.config('gaussian', rounds=3, client_lr=0.1, clip_norm=0.5, epsilon=3.0,
               seed=2)
  assert (c.rounds, c.noise_seed, c.target_epsilon) == (3, 1002, 3.0)
  assert s.config('none', rounds=3, client_lr=0.1, clip_norm=1e6).noise_seed \
      is None


def test_importing_it_does_not_start_tensorflow():
  code = ('import sys; from tff_quant.training import tuning_settings; '
          'print("tensorflow" in sys.modules)')
  out = subprocess.run([sys.executable, '-c', code], capture_output=True,
                       text=True, check=True).stdout
  assert out.strip() == 'False'


def test_check_folder_refuses_other_settings_and_writes_nothing(tmp_path):
  """An empty folder passes (nothing is written there: the tuning writes
  config.json itself); a folder whose config.json holds other settings is
  refused, naming the folder's settings."""
  first = tuning_settings.Settings(output_dir=str(tmp_path), rounds=2)
  fixed = first.check_folder()
  assert fixed['rounds'] == 2 and not (tmp_path / 'config.json').exists()
  (tmp_path / 'config.json').write_text(json.dumps(fixed))
  assert first.check_folder() == fixed
  with pytest.raises(ValueError, match="other settings .*'rounds': 2"):
    tuning_settings.Settings(output_dir=str(tmp_path), rounds=3).check_folder()
