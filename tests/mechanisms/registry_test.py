"""Adding a mechanism is one file: a new module in the package is listed,
calibrated and trained with no other edit anywhere."""

import gc
import json
import os
import shutil
import subprocess
import sys

import pytest

from tff_quant import mechanisms

PACKAGE_DIR = os.path.dirname(mechanisms.__file__)
ROOT = os.path.dirname(os.path.dirname(PACKAGE_DIR))
SCHEDULE = dict(delta=1e-5, rounds=20, clients_per_round=10, total_clients=1000)


_TOY = "from tff_quant.mechanisms.pbm import PBM\n\n\nclass Toy(PBM):\n  name = 'toy'\n"

# In a copy of the package (the test suite runs in parallel: a toy.py in the
# checkout's package would be seen by the tests that list or digest it).
_LISTED_AND_CALIBRATED = r'''
import json, sys
from tff_quant import mechanisms
from tff_quant.accounting import calibration, composition
assert mechanisms.__file__.startswith(sys.argv[1]), mechanisms.__file__
registry = mechanisms.registry()
schedule = json.loads(sys.argv[2])
mech = calibration.calibrate('toy', 2.0, **schedule, dim=3)
eps = composition.training_guarantee(mech, use_pld=False, dim=3, **schedule,
                                     orders=calibration.FAST_ORDERS).epsilon
print('RESULT', json.dumps(dict(cls=registry['toy'].__name__,
                                calibrated=type(mech).__name__, eps=eps)))
'''


def test_a_new_module_is_listed_calibrated_and_trained(tmp_path):
  pkg = tmp_path / 'pkg'
  shutil.copytree(os.path.join(ROOT, 'tff_quant'), pkg / 'tff_quant',
                  ignore=shutil.ignore_patterns('__pycache__'))
  (pkg / 'tff_quant' / 'mechanisms' / 'toy.py').write_text(_TOY)
  # The copy first, then the checkout (for experiments/): run from tmp_path,
  # so the checkout's own tff_quant is not the working folder's.
  env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(pkg), ROOT]))
  res = subprocess.run([sys.executable, '-c', _LISTED_AND_CALIBRATED, str(pkg),
                        json.dumps(SCHEDULE)], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=600)
  assert res.returncode == 0, res.stderr[-2000:]
  out = json.loads(res.stdout.split('RESULT ', 1)[1])
  assert out['cls'] == 'Toy' and out['calibrated'] == 'Toy'
  assert out['eps'] <= 2.0
  res = subprocess.run(
      [sys.executable, '-m', 'experiments.fl_emnist', '--mechanism=toy',
       '--mechanism_params=theta=0.2,num_levels=8', '--dataset=mnist',
       '--model=logreg', '--rounds=1', '--clients_per_round=2',
       '--total_clients=6', '--clip_norm=1.0', f'--root_output_dir={tmp_path}',
       '--experiment_name=toy'],
      cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
  assert res.returncode == 0, res.stderr[-2000:]
  with open(tmp_path / 'toy' / 'summary.json') as f:
    summary = json.load(f)
  assert summary['mechanism'].startswith('Toy(') and 'theta=0.2' in summary['mechanism']
  assert summary['config']['mechanism_params'] == {'num_levels': 8, 'theta': 0.2}
  assert 0 < summary['epsilon'] < float('inf')
  assert 'toy' not in mechanisms.registry()   # the checkout's package: untouched


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
