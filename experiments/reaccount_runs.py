"""Re-accounts finished fl_emnist runs with the current accountant, no training.

Accounting improves (a tighter bound, or one that drops an assumption) after
runs that took hours; this recomputes each run's whole-model ε from what it ran
(the mechanism rebuilt from config.json and the dimension in summary.json, the
rounds it completed) and writes one row per run next to the ε it was reported
with, as ε ∈ [attained, proved] (`accounting.attained`). TFF's own aggregators (peers) and the noise-free baseline are listed as
they were: their accounting is closed form, with no assumption on the others.

  python -m experiments.reaccount_runs --runs_dir=results/frontier_fl
"""

import json
import math
import os

from absl import app
from absl import flags

from tff_quant import accounting
from tff_quant import mechanisms
from tff_quant.accounting import secure_sum
from tff_quant.program import cli, results_io

FLAGS = flags.FLAGS
flags.DEFINE_string('runs_dir', None, 'Folder of fl_emnist run folders.')
flags.DEFINE_enum('others', 'any', secure_sum.OTHERS, 'The other clients\' inputs '
                  'the guarantee covers: any (proved) or extremes (±c, assumed).')
flags.DEFINE_string('output_csv', None, 'CSV to write (default '
                    '<runs_dir>/reaccounted.csv).')

COLUMNS = ('run', 'mechanism', 'rounds', 'test_accuracy', 'epsilon_reported',
           'epsilon_attained', 'epsilon_now', 'others', 'delta', 'attained_by',
           'note')


def reaccount(run_dir: str, others: str = 'any'):
  """One row: the run's reported ε and its ε under the current accountant."""
  with open(os.path.join(run_dir, 'config.json')) as f:
    config = json.load(f)
  with open(os.path.join(run_dir, 'summary.json')) as f:
    summary = json.load(f)
  row = dict(run=os.path.basename(os.path.normpath(run_dir)),
             mechanism=config['mechanism'], rounds=summary['rounds_completed'],
             test_accuracy=summary['test_accuracy'],
             epsilon_reported=summary['epsilon'], epsilon_now=summary['epsilon'],
             epsilon_attained='', others='', delta=summary['delta'],
             attained_by='', note='')
  if config['mechanism'] not in mechanisms.registry():
    row['note'] = 'not a registry mechanism (peer or noise-free): as reported'
    return row
  dim = summary['dim']
  # Runs from before ℓ2 routing had c∞ = clip_norm/√d (multiple 1).
  c = (config.get('coordinate_clip_multiple', 1.0) * config['clip_norm'] /
       math.sqrt(dim))
  mech = mechanisms.get(config['mechanism']).for_coordinate_bound(
      c, **config['mechanism_params'])
  g = accounting.training_guarantee(
      mech, summary['rounds_completed'], config['clients_per_round'],
      config['total_clients'], summary['delta'], dim=dim,
      l2_clip=config['clip_norm'], use_pld=False, others=others)
  row.update(epsilon_now=g.epsilon, others=others, note=g.assumptions,
             epsilon_attained=('' if g.epsilon_attained is None
                               else g.epsilon_attained),
             attained_by=g.attained_inputs)
  return row


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  with cli.user_errors_exit():
    if not FLAGS.runs_dir or not os.path.isdir(FLAGS.runs_dir):
      raise ValueError(f'--runs_dir must be a folder of fl_emnist runs, got '
                       f'{FLAGS.runs_dir!r}.')
    runs = sorted(d for d in os.listdir(FLAGS.runs_dir)
                  if os.path.exists(os.path.join(FLAGS.runs_dir, d, 'summary.json')))
    if not runs:
      raise ValueError(f'--runs_dir={FLAGS.runs_dir} holds no finished run '
                       '(summary.json).')
    rows = [reaccount(os.path.join(FLAGS.runs_dir, r), FLAGS.others) for r in runs]
  out = FLAGS.output_csv or os.path.join(FLAGS.runs_dir, 'reaccounted.csv')
  results_io.write_csv(out, COLUMNS, [[r[c] for c in COLUMNS] for r in rows])
  print('| run | mechanism | rounds | test accuracy | ε reported | '
        'ε now ∈ [attained, proved] |')
  print('|---|---|---|---|---|---|')
  for r in rows:
    low = ('' if r['epsilon_attained'] == '' else
           f'[{r["epsilon_attained"]:.4g}, {r["epsilon_now"]:.4g}]')
    print(f'| {r["run"]} | {r["mechanism"]} | {r["rounds"]} | '
          f'{r["test_accuracy"]:.3f} | {r["epsilon_reported"]:.4g} | '
          f'{low or format(r["epsilon_now"], ".4g")} |')
  print(f'Wrote {out} (others={FLAGS.others}; data: the runs\' own, see their '
        'summary.json)')


def entry_point():
  """The console script `tff-quant-reaccount-runs` (setup.py): runs `main` as
  `python -m experiments.reaccount_runs` does, from any folder."""
  cli.run(main)


if __name__ == '__main__':
  entry_point()
