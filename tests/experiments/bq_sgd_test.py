import os

from tff_quant.program import results_io
from tests.experiments import binaries


def _run(tmp_path, *flags):
  return binaries.run('experiments.bq_sgd',
                      [f'--root_output_dir={tmp_path}', *flags])


def test_smoke_table2_rows_then_bad_flags(tmp_path):
  res = _run(tmp_path, '--rows=table2', '--rounds=2', '--eval_every=1',
             '--noise_seed=1')
  assert res.returncode == 0, res.stderr[-3000:]
  assert 'Exception ignored' not in res.stderr, res.stderr[-3000:]
  rows = results_io.read_csv(str(tmp_path / 'mnist' / 'summary.csv'))
  assert [r['row'] for r in rows] == ['b8_eps1.72', 'b8_eps3.44', 'b8_eps8.72']
  assert [(r['s'], r['m']) for r in rows] == [('1', '251'), ('2', '251'), ('4', '247')]
  # The paper's ε for (1, 251) is below its own Lemma 1 (2.57 with d_p, |D|=15000);
  # with this run's 1,000 examples per client it is larger still.
  assert float(rows[0]['lemma1_eps_dp']) > 1.72
  assert rows[0]['exact_rdp_per_round_alpha2'] == 'inf'
  assert rows[0]['lemma1_rule_sm'] == 'infeasible'
  assert 'MNIST' in res.stdout and 'lenet5 d = 61706' in res.stdout
  assert not res.leftover_workers  # none left behind
  bad = _run(tmp_path / 'bad', '--rows=table9')
  assert bad.returncode == 2 and '--rows' in bad.stderr
  bad = _run(tmp_path / 'bad', '--rows=table2', '--paper_sm=false')
  assert bad.returncode == 2 and 'No (s, m)' in bad.stderr
  assert not os.path.exists(tmp_path / 'bad')
