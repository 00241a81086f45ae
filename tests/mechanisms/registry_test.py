"""Adding a mechanism is one file: a new module in the package is listed,
calibrated and trained with no other edit anywhere."""

import gc
import json
import os
import subprocess
import sys

import pytest

from tff_quant import mechanisms
from tff_quant.accounting import calibration, composition

PACKAGE_DIR = os.path.dirname(mechanisms.__file__)
ROOT = os.path.dirname(os.path.dirname(PACKAGE_DIR))
SCHEDULE = dict(delta=1e-5, rounds=20, clients_per_round=10, total_clients=1000)


@pytest.fixture
def toy_module():
  """tff_quant/mechanisms/toy.py holding only `class Toy(PBM): name = 'toy'`."""
  path = os.path.join(PACKAGE_DIR, 'toy.py')
  assert not os.path.exists(path), f'{path} exists already'
  with open(path, 'w') as f:
    f.write('from tff_quant.mechanisms.pbm import PBM\n\n\n'
            'class Toy(PBM):\n  name = \'toy\'\n')
  try:
    yield path
  finally:
    os.remove(path)
    sys.modules.pop('tff_quant.mechanisms.toy', None)
    if hasattr(mechanisms, 'toy'):
      delattr(mechanisms, 'toy')
    gc.collect()
  assert 'toy' not in mechanisms.registry()


def test_a_new_module_is_listed_calibrated_and_trained(toy_module, tmp_path):
  del toy_module
  registry = mechanisms.registry()
  assert 'toy' in registry and registry['toy'].__name__ == 'Toy'
  mech = calibration.calibrate('toy', 2.0, **SCHEDULE, dim=3)
  assert type(mech).__name__ == 'Toy'
  eps = composition.training_guarantee(mech, use_pld=False, dim=3, **SCHEDULE,
                                       orders=calibration.FAST_ORDERS).epsilon
  assert eps <= 2.0
  res = subprocess.run(
      [sys.executable, '-m', 'experiments.fl_emnist', '--mechanism=toy',
       '--mechanism_params=theta=0.2,num_levels=8', '--dataset=mnist',
       '--model=logreg', '--rounds=1', '--clients_per_round=2',
       '--total_clients=6', '--clip_norm=1.0', f'--root_output_dir={tmp_path}',
       '--experiment_name=toy'],
      cwd=ROOT, capture_output=True, text=True, timeout=600)
  assert res.returncode == 0, res.stderr[-2000:]
  with open(tmp_path / 'toy' / 'summary.json') as f:
    summary = json.load(f)
  assert summary['mechanism'].startswith('Toy(') and 'theta=0.2' in summary['mechanism']
  assert summary['config']['mechanism_params'] == {'num_levels': 8, 'theta': 0.2}
  assert 0 < summary['epsilon'] < float('inf')


def test_registry_names_are_unique_and_lookups_fail_clearly():
  names = mechanisms.registry()
  assert list(names) == sorted(names)
  with pytest.raises(ValueError, match='`mechanism` must be one of'):
    mechanisms.get('laplace')
  assert type(mechanisms.build('pbm', 0.5, theta=0.1)).__name__ == 'PBM'


def test_a_clashing_name_is_an_error():
  class Clash(mechanisms.PBM):  # pylint: disable=unused-variable
    name = 'pbm'
  try:
    with pytest.raises(ValueError, match="'pbm' is claimed by both"):
      mechanisms.registry()
  finally:
    del Clash
    gc.collect()
  assert mechanisms.registry()['pbm'] is mechanisms.PBM
