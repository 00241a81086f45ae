import csv
import json
import math
import os
import subprocess
import sys

from tff_quant import accounting
from tff_quant.program import frontier as privacy_frontier
from tff_quant.program import results_io

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Every client in every round (n = N) at δ = 0.01: what is checked here (rows,
# resume, report, refusals) does not depend on subsampling, and the report's
# generic-subsampling penalty of an unsampled Gaussian costs a second, not
# the ~8 s of its bisection over WOR-sampled RDP curves (once per report).
SMALL = ['--mechanisms=skellam,rqm', '--bits=4', '--epsilons=10', '--dims=1000',
         '--clients=4', '--rounds=10', '--total_clients=4', '--delta=0.01',
         '--coordinate_clip_multiples=3']


def run_binary(args, timeout=600):
  return subprocess.run([sys.executable, '-m', 'experiments.privacy_frontier'] + args,
                        cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def test_small_frontier_rows_resume_and_report(tmp_path):
  out = tmp_path / 'f'
  res = run_binary(SMALL + [f'--output_dir={out}'])
  assert res.returncode == 0, res.stderr[-2000:]
  assert 'Data: none' in res.stdout and 'RQM vs PBM' in res.stdout
  with open(out / 'frontier.csv') as f:
    rows = list(csv.DictReader(f))
  assert list(rows[0])[:11] == list(privacy_frontier.COLUMNS[:11])
  by = {r['mechanism']: r for r in rows}
  assert set(by) == {'gaussian', 'skellam', 'rqm'}
  # The Gaussian on the cells' RDP route against itself at its best route.
  g = by['gaussian']
  assert float(g['ratio_to_gaussian']) >= 1.0
  assert math.isclose(float(g['ratio_to_gaussian']),
                      float(g['debiased_error_per_coordinate'])
                      / float(g['gaussian_mse']))
  assert float(by['gaussian']['slope']) == 1.0
  # Skellam cannot reach ε = 10 in 4 bits here (the modulus wraps): inf + why.
  assert by['skellam']['mse_per_coordinate'] == 'inf'
  assert 'not reachable for skellam within 4 bits' in by['skellam']['reason']
  for name in ('rqm',):
    r = by[name]
    assert float(r['epsilon_achieved']) <= 10.0
    assert int(r['bits_used']) <= 4
    params = json.loads(r['params'])
    assert math.isclose(params['clip'], 3 / math.sqrt(1000))
    assert math.isclose(float(r['ratio_to_gaussian']),
                        float(r['debiased_error_per_coordinate'])
                        / float(r['gaussian_mse']))
    assert math.isclose(float(r['mse_ratio_to_gaussian']),
                        float(r['mse_per_coordinate']) / float(r['gaussian_mse']))
    assert float(r['slope']) == 1.0   # RQM is unbiased
    # The optimistic end (calibrated on the attained ε) and the proved
    # calibration's attained ε.
    assert (float(r['ratio_to_gaussian_attained'])
            <= float(r['ratio_to_gaussian']))
    assert float(r['epsilon_attained']) <= float(r['epsilon_achieved'])
  # A closed form's ends are one value (here: both out of reach).
  assert by['skellam']['ratio_to_gaussian_attained'] == 'inf'
  assert g['ratio_to_gaussian_attained'] == g['ratio_to_gaussian']
  assert (out / 'frontier.png').exists() and (out / 'frontier.md').exists()
  assert ('Flips between the attained and the proved ε'
          in (out / 'frontier.md').read_text())
  again = run_binary(SMALL + [f'--output_dir={out}'])
  assert again.returncode == 0 and '3 already in' in again.stdout
  # Every row carries the digest of the accountant code that computed it;
  # a row of other code is marked in the report and recomputed on resume.
  digest = accounting.provenance.SOURCE_DIGEST
  assert {r['accountant'] for r in rows} == {digest}
  assert 'computed every row' in (out / 'frontier.md').read_text()
  with open(out / 'frontier.csv') as f:
    table = list(csv.DictReader(f))
  for r in table:
    if r['mechanism'] == 'rqm':
      r['accountant'] = '0' * 16
  results_io.write_csv(str(out / 'frontier.csv'), list(table[0]),
                       [list(r.values()) for r in table])
  privacy_frontier.write_report(table, str(out))
  assert ('the 1 marked † come from other accountant code'
          in (out / 'frontier.md').read_text())
  redone = run_binary(SMALL + [f'--output_dir={out}'])
  assert redone.returncode == 0 and '2 already in' in redone.stdout
  with open(out / 'frontier.csv') as f:
    assert {r['accountant'] for r in csv.DictReader(f)} == {digest}
  other = run_binary(SMALL + [f'--output_dir={out}', '--rtol=0.1'])
  assert other.returncode != 0 and '--fresh' in other.stderr + other.stdout


def test_a_folder_ranked_by_plain_mse_is_not_resumed(tmp_path):
  """Cells written before the debiased error (no metric in the config, MSE
  columns) are refused with the --fresh hint, not mixed into one report."""
  out = tmp_path / 'f'
  out.mkdir()
  old = dict(coordinate_clip_multiples=[3.0], rtol=0.01, max_operations=1e9,
             l2_clip=1.0, others='any')
  # Nor cells with the proved end only (no `ends` in the config).
  for config in (old, dict(old, metric=privacy_frontier.METRIC)):
    (out / 'frontier_config.json').write_text(json.dumps(config))
    (out / 'frontier.csv').write_text('mechanism,bits\n')
    res = run_binary(SMALL + [f'--output_dir={out}'])
    assert res.returncode != 0 and '--fresh' in res.stderr + res.stdout
    assert 'Traceback' not in res.stderr


def test_cost_limit_writes_inf_with_the_reason(tmp_path):
  out = tmp_path / 'f'
  res = run_binary(['--mechanisms=qmgeo', '--bits=8', '--epsilons=10',
                    '--dims=1000',
                    '--clients=4', '--rounds=10', '--total_clients=4',
                    '--delta=0.01',
                    '--coordinate_clip_multiples=3', '--max_operations=1e4',
                    f'--output_dir={out}'])   # not even one client's search fits
  assert res.returncode == 0, res.stderr[-2000:]
  with open(out / 'frontier.csv') as f:
    row = [r for r in csv.DictReader(f)
           if r['mechanism'] == 'qmgeo'][0]
  assert row['debiased_error_per_coordinate'] == 'inf'
  assert row['mse_per_coordinate'] == 'inf' and '--max_operations' in row['reason']


def test_bad_input_is_one_line_and_writes_nothing(tmp_path):
  for flag in ('--epsilons=-1', '--clients=5000', '--bits=x', '--mechanisms=foo',
               '--max_memory_gb=0'):
    out = tmp_path / flag.strip('-').split('=')[0]
    res = run_binary(SMALL + [flag, f'--output_dir={out}'])
    assert res.returncode != 0
    assert flag.split('=')[0] in res.stderr, res.stderr[-1000:]
    assert 'Traceback' not in res.stderr, res.stderr[-1000:]
    assert not out.exists()


def test_cells_shaped_by_a_limit_are_recomputed_only_when_asked(tmp_path):
  out = tmp_path / 'f'
  args = [a for a in SMALL if not a.startswith('--mechanisms')] + [
      '--mechanisms=rqm', f'--output_dir={out}']
  read = lambda: {r['mechanism']: r for r in csv.DictReader(open(out / 'frontier.csv'))}
  res = run_binary(args + ['--max_operations=1e3'])
  assert res.returncode == 0, res.stderr[-2000:]
  first = read()['rqm']
  assert '--max_operations' in first['reason']
  # Another limit is accepted on resume; without --retry_limited the row stays.
  again = run_binary(args)
  assert again.returncode == 0 and '2 already in' in again.stdout
  assert read()['rqm'] == first
  retried = run_binary(args + ['--retry_limited'])
  assert retried.returncode == 0, retried.stderr[-2000:]
  assert '1 already in' in retried.stdout   # the Gaussian's row is kept
  rows = read()
  assert len(list(csv.DictReader(open(out / 'frontier.csv')))) == 2
  assert math.isfinite(float(rows['rqm']['debiased_error_per_coordinate']))
  assert '--max_operations' not in rows['rqm']['reason']


def test_a_second_run_on_the_same_output_is_refused_at_once(tmp_path):
  out = tmp_path / 'f'
  with results_io.exclusive(str(out), 'privacy_frontier run'):
    res = run_binary(SMALL + [f'--output_dir={out}'])
  assert res.returncode != 0 and 'Traceback' not in res.stderr
  assert 'Another privacy_frontier run is writing' in res.stderr + res.stdout
  assert not (out / 'frontier.csv').exists()
