import os
import subprocess
import sys

import pytest

from experiments import rqp_sgd
from tff_quant.program import results_io

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _cfg(tmp_path, **kw):
  cfg = dict(dataset='breast_cancer', model='logreg', methods=list(rqp_sgd.METHODS),
             runs=2, batch_size=None, steps=3, learning_rate=1.0, clip=0.45,
             bound=0.3, bits=4, epsilon=1.0, delta=1e-7, rqp_noise_multiplier=2.0,
             rqp_q=None, average_iterates=True, seed=0,
             root_output_dir=str(tmp_path))
  cfg.update(kw)
  return cfg


@pytest.mark.parametrize('model', ['logreg', 'svm'])
def test_smoke_breast_cancer_writes_results(tmp_path, model):
  summary = rqp_sgd.run(_cfg(tmp_path, model=model), log=lambda s: None)
  out = tmp_path / f'breast_cancer_{model}'
  runs = results_io.read_csv(str(out / 'runs.csv'))
  assert len(runs) == 2 * len(rqp_sgd.METHODS)
  assert all(0.0 <= float(r['test_accuracy']) <= 1.0 for r in runs)
  assert [r['method'] for r in results_io.read_csv(str(out / 'summary.csv'))] == list(
      rqp_sgd.METHODS)
  assert summary['dim'] == 31 and summary['n_train'] == 455
  # q was chosen by the paper's count; the sound ε of the same run is larger.
  assert summary['rqp_paper_epsilon'] == pytest.approx(1.0, rel=1e-5)
  assert summary['rqp_sound_epsilon'] > summary['rqp_paper_epsilon']
  assert 'Breast Cancer' in summary['data']


def test_nonprivate_training_learns(tmp_path):
  summary = rqp_sgd.run(_cfg(tmp_path, methods=['nonprivate'], steps=46, runs=1),
                        log=lambda s: None)
  assert summary['results']['nonprivate']['median'] > 90.0


def test_bad_flags_fail_with_a_clear_message(tmp_path):
  with pytest.raises(ValueError, match='--methods'):
    rqp_sgd.run(_cfg(tmp_path, methods=['sgd']))
  with pytest.raises(ValueError, match='--model=svm'):
    rqp_sgd.run(_cfg(tmp_path, dataset='mnist', model='svm'))
  res = subprocess.run([sys.executable, '-m', 'experiments.rqp_sgd', '--runs=0',
                        f'--root_output_dir={tmp_path}'], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
  assert res.returncode == 2, res.stderr[-2000:]
  assert res.stderr.strip() == 'error: flag --runs=0: 0 is not a positive integer'
  assert 'Exception ignored' not in res.stderr, res.stderr[-2000:]
  assert not os.listdir(tmp_path)
