"""The RQM paper's three panels (loss, accuracy, privacy) from fl_emnist run folders.

  python -m experiments.plot_fl --run_dirs=results/fl/none,results/fl/rqm \
      --output=results/fl/fl.png
"""

import csv
import json
import math
import os
import textwrap

from absl import app
from absl import flags
import matplotlib
matplotlib.use('Agg')
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

from tff_quant.program import cli  # pylint: disable=g-import-not-at-top

FLAGS = flags.FLAGS
flags.DEFINE_list('run_dirs', None, 'fl_emnist run folders (metrics.csv inside).')
flags.DEFINE_string('output', 'fl.png', 'PNG to write.')


def read_run(run_dir):
  path = os.path.join(run_dir, 'metrics.csv')
  if not os.path.exists(path):
    raise FileNotFoundError(f'{path} not found: is {run_dir} an fl_emnist run?')
  with open(path) as f:
    rows = list(csv.DictReader(f))
  with open(os.path.join(run_dir, 'config.json')) as f:
    config = json.load(f)
  summary_path = os.path.join(run_dir, 'summary.json')
  data = ''
  if os.path.exists(summary_path):
    with open(summary_path) as f:
      data = json.load(f).get('data', '')
  return rows, config, data


def plot(run_dirs, output):
  fig, axes = plt.subplots(1, 3, figsize=(15, 4))
  data_line = ''
  runs = [read_run(d) for d in run_dirs]
  names = [config['mechanism'] for _, config, _ in runs]
  for i, (run_dir, (rows, config, data)) in enumerate(zip(run_dirs, runs)):
    # One colour per run in every panel (tab20 beyond the 10 default colours).
    color = f'C{i}' if len(runs) <= 10 else plt.get_cmap('tab20')(i % 20)
    data_line = data_line or data
    # The mechanism, or the run folder where several runs share one.
    label = (config['mechanism'] if names.count(config['mechanism']) == 1
             else os.path.basename(os.path.normpath(run_dir)))
    rnd = [int(r['round']) for r in rows]
    axes[0].plot(rnd, [float(r['train_loss']) for r in rows], label=label,
                 color=color)
    pts = [(int(r['round']), float(r['test_accuracy'])) for r in rows
           if r['test_accuracy'] not in ('', 'nan')]
    axes[1].plot([p[0] for p in pts], [p[1] for p in pts], marker='.', label=label,
                 color=color)
    eps = [float(r['epsilon']) for r in rows]
    if all(math.isfinite(e) for e in eps):
      axes[2].plot(rnd, eps, label=label, color=color)
  axes[0].set(xlabel='round', ylabel='train loss', title='Loss')
  axes[1].set(xlabel='round', ylabel='test accuracy', title='Accuracy')
  axes[2].set(xlabel='round', ylabel='ε of the whole model (δ = 1/N)',
              title='Privacy (whole model update, cumulative)')
  for ax in axes:
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6 if len(run_dirs) > 6 else None)
  fig.suptitle('\n'.join(textwrap.wrap(data_line, 150)), fontsize=8)
  fig.tight_layout()
  os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
  fig.savefig(output, dpi=120)
  return output


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  with cli.user_errors_exit():
    if not FLAGS.run_dirs:
      raise ValueError('--run_dirs is required (fl_emnist run folders).')
    print(plot(FLAGS.run_dirs, FLAGS.output))


def entry_point():
  """The console script `tff-quant-plot-fl` (setup.py): runs `main` as
  `python -m experiments.plot_fl` does, from any folder."""
  cli.run(main)


if __name__ == '__main__':
  entry_point()
