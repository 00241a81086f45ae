"""QMGeo distributed SGD on MNIST (paper 001, Sec. VI, Figs. 5-6), through TFF secure sum.

PCA to 100 dims, MLP 100-32-10 (d = 3,562), 5 users (IID), batch 64, lr 0.04,
element-wise clip 0.05 of each user's batch gradient, QMGeo with (R, p) in
{(8, .5), (8, .9), (16, .9)} and a no-quantization baseline (plain mean). The
QMGeo used is the sound `full_support` variant (as written QMGeo has ε = inf).
Per-round ε: the paper's eq. (27) at α = 2 next to the exact per-round RDP at
α = 2 (tff_quant.accounting.sgd.example_level_rdp) for one user's message (the
paper's local model) and for the secure sum of all users (what our server sees).
Each setting is a resumable run under --root_output_dir/<setting>.

  python -m experiments.qmgeo_mnist --rounds=300
"""

import math
import os

from absl import app
from absl import flags
import numpy as np

from tff_quant import data, mechanisms, models
from tff_quant.accounting import bounds, sgd
from tff_quant.common import validation
from tff_quant.program import cli, experiment, results_io

FLAGS = flags.FLAGS
flags.DEFINE_list('settings', ['none', '8:0.5', '8:0.9', '16:0.9'],
                  '"none" (no quantization) and/or "R:p" QMGeo settings.')
flags.DEFINE_integer('rounds', 300, 'Communication rounds (one SGD step each).',
                     lower_bound=1)
flags.DEFINE_integer('num_users', 5, 'Users (all take part in every round).',
                     lower_bound=1)
flags.DEFINE_integer('batch_size', 64, 'Mini-batch per user per round.', lower_bound=1)
flags.DEFINE_float('learning_rate', 0.04, 'Server step η.')
flags.DEFINE_float('clip', 0.05, 'Element-wise gradient clip W_max (= QMGeo range).')
flags.DEFINE_integer('pca_dims', 100, 'PCA dimensions of the input.', lower_bound=1)
flags.DEFINE_float('delta', 1e-5, 'δ for the whole-run ε.')
flags.DEFINE_integer('eval_every', 25, 'Evaluate every k rounds.', lower_bound=1)
flags.DEFINE_integer('seed', 0, 'Data split / batch sampling seed.', lower_bound=0)
flags.DEFINE_integer('noise_seed', None, 'Reproducible quantization noise '
                     '(experiments only); default: unpredictable client seeds.',
                     lower_bound=0)
flags.DEFINE_bool('fresh', False, 'Discard existing runs instead of resuming.')
flags.DEFINE_string('root_output_dir', 'results/qmgeo', 'Output folder.')

PAPER_EPS_PER_ROUND = {(8, 0.5): 0.784, (8, 0.9): 2.626, (16, 0.9): 4.492}
PAPER_KAPPA = 0.005333  # 64 / 12,000 (60,000 MNIST images over 5 users)


def parse_settings(settings):
  """['none', 'R:p', ...] -> [None | (R, p)], with a clear error."""
  out = []
  for s in settings:
    if s == 'none':
      out.append(None)
      continue
    try:
      r, p = s.split(':')
      out.append((int(r), float(p)))
    except ValueError:
      raise ValueError(f'--settings entries must be "none" or "R:p" (e.g. 8:0.5), '
                       f'got {s!r}') from None
    mechanisms.QMGeo(1.0, out[-1][0], out[-1][1])  # validates R and p
  if not out:
    raise ValueError('--settings must not be empty')
  return out


def load_pca_mnist(dims: int):
  """(train x, train y, test x, test y, description): PCA fitted on train pixels."""
  (xtr, ytr), (xte, yte), desc = data.load_image_arrays('mnist')
  flat = lambda v: v.reshape(len(v), -1).astype(np.float64)
  xtr, xte = flat(xtr), flat(xte)
  if not 1 <= dims <= xtr.shape[1]:
    raise ValueError(f'--pca_dims must be in [1, {xtr.shape[1]}], got {dims}')
  mean = xtr.mean(0)
  _, _, vt = np.linalg.svd(xtr - mean, full_matrices=False)
  proj = lambda v: ((v - mean) @ vt[:dims].T).astype(np.float32)
  return proj(xtr), ytr, proj(xte), yte, f'{desc}; PCA to {dims} dims fitted on train'


def privacy(mech, dim, kappa, num_users, rounds, delta):
  """Per-round ε figures for one QMGeo mechanism (paper's eq. 27 and exact RDP)."""
  local = sgd.example_level_rdp(mech, 1, dim, kappa, rounds, delta)
  secure = sgd.example_level_rdp(mech, num_users, dim, kappa, rounds, delta)
  return dict(
      paper_reported_eps_per_round=PAPER_EPS_PER_ROUND.get((mech.r_levels, mech.p),
                                                       math.nan),
      paper_eq27_at_paper_kappa=bounds.qmgeo_eq27(mech, 2, dim, PAPER_KAPPA),
      paper_eq27_here=bounds.qmgeo_eq27(mech, 2, dim, kappa),
      exact_rdp2_per_round_local=local['per_round_rdp'][2],
      exact_rdp2_per_round_secure_sum=secure['per_round_rdp'][2],
      epsilon_local=local['epsilon'], epsilon_secure_sum=secure['epsilon'],
      as_written_epsilon_infinity=math.inf)


def plot(root_dir, summaries, desc, path):
  """Test accuracy vs rounds of every setting (the paper's Figs. 5-6 in one panel)."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, ax = plt.subplots(figsize=(6, 4))
  for s in summaries:
    rows = results_io.read_csv(os.path.join(root_dir, s['setting'], 'metrics.csv'))
    pts = [(int(r['round']), float(r['test_accuracy'])) for r in rows
           if r['test_accuracy'] not in ('', 'nan')]
    label = s['setting'] if 'paper_reported_eps_per_round' not in s else (
        f'{s["setting"]} (paper ε/round {s["paper_reported_eps_per_round"]})')
    ax.plot(*zip(*pts), '--' if s['setting'] == 'none' else '-', label=label)
  ax.set_xlabel('round')
  ax.set_ylabel('test accuracy')
  ax.set_title(f'QMGeo distributed SGD; {desc[:60]}', fontsize=7)
  ax.legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


COLUMNS = [
    experiment.Column('setting', 'setting'),
    experiment.Column('rounds', 'rounds'),
    experiment.Column('final_test_accuracy', 'test acc', '{:.4f}'.format),
    experiment.Column('paper_reported_eps_per_round', 'paper ε/round (eq. 27, α=2)'),
    experiment.Column('paper_eq27_at_paper_kappa', 'eq. 27 value', '{:.3f}'.format),
    experiment.Column('exact_rdp2_per_round_local', 'exact RDP(2)/round, local',
                      '{:.4g}'.format),
    experiment.Column('exact_rdp2_per_round_secure_sum',
                      'exact RDP(2)/round, secure sum', '{:.4g}'.format),
    experiment.Column('epsilon_local', 'ε run, local', '{:.4g}'.format),
    experiment.Column('epsilon_secure_sum', 'ε run, secure sum', '{:.4g}'.format),
]


def check_flags():
  """The settings of the flags, refused before TensorFlow starts where a
  flag is bad (`cli.run`'s check; main checks again).

  Returns:
    `parse_settings(--settings)`.

  Raises:
    TypeError, ValueError: naming the flag and its allowed values.
  """
  setting_list = parse_settings(FLAGS.settings)
  cli.check_flags(FLAGS, at_least_one=('rounds', 'num_users', 'batch_size',
                                       'eval_every'),
                  positive=('learning_rate', 'clip'))
  validation.check_probability('--delta', FLAGS.delta)
  return setting_list


def main(argv):
  # TensorFlow is imported by cli.run before absl starts (TF 2.14's Keras
  # built by a TensorFlow imported inside app.run fails).
  # pylint: disable=g-import-not-at-top
  import tensorflow as tf
  import tensorflow_federated as tff
  from tff_quant.aggregators import quantization_factory
  from tff_quant.training import distributed_sgd
  # pylint: enable=g-import-not-at-top
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  with cli.user_errors_exit():
    setting_list = check_flags()
    xtr, ytr, xte, yte, desc = load_pca_mnist(FLAGS.pca_dims)
    clients = distributed_sgd.split_among_clients(xtr, ytr, FLAGS.num_users, FLAGS.seed)
    local_size = len(clients[0][1])
    if FLAGS.batch_size > local_size:
      raise ValueError(f'--batch_size must be <= {local_size} (examples per user), '
                       f'got {FLAGS.batch_size}')
  kappa = FLAGS.batch_size / local_size
  keras_fn = lambda: models.get('mlp', (FLAGS.pca_dims,), 10)
  dim = models.num_params(keras_fn())
  spec = (tf.TensorSpec([None, FLAGS.pca_dims], tf.float32),
          tf.TensorSpec([None], tf.int32))
  print(f'data: {desc}; {FLAGS.num_users} users x {local_size} examples (IID), '
        f'batch {FLAGS.batch_size} (κ = {kappa:.5f}; paper κ = {PAPER_KAPPA}); '
        f'd = {dim}', flush=True)
  shared = {k: getattr(FLAGS, k) for k in (
      'num_users', 'batch_size', 'learning_rate', 'clip', 'pca_dims', 'seed',
      'noise_seed', 'rounds')}
  settings = []
  for setting in setting_list:
    name = 'none' if setting is None else f'R{setting[0]}_p{setting[1]}'
    mech = (None if setting is None else
            mechanisms.QMGeo(FLAGS.clip, setting[0], setting[1], full_support=True))
    settings.append(experiment.Setting(name, dict(shared, setting=name, data=desc),
                                       mech))

  def run_one(setting, run_dir):
    mech = setting.payload
    if mech is None:
      factory, eps = tff.aggregators.UnweightedMeanFactory(), {}
    else:
      eps = privacy(mech, dim, kappa, FLAGS.num_users, FLAGS.rounds, FLAGS.delta)
      factory = quantization_factory.QuantizationFactory(
          mech, max_clients_per_round=FLAGS.num_users, seed=FLAGS.noise_seed,
          diagnostics=True)   # a simulation: clipped fractions logged
    process = distributed_sgd.build_distributed_sgd(
        keras_fn, spec, factory, FLAGS.learning_rate, 'elementwise', FLAGS.clip)
    print(f'{setting.name}: ' + (str(mech) if mech else 'no quantization'), flush=True)
    acc, _ = distributed_sgd.train(
        process, keras_fn, clients, (xte, yte), FLAGS.rounds, FLAGS.batch_size,
        run_dir, FLAGS.seed, FLAGS.eval_every, log=lambda s: print(s, flush=True))
    return dict(data=desc, dim=dim, kappa=kappa, rounds=FLAGS.rounds,
                final_test_accuracy=acc, delta=FLAGS.delta, **eps)

  with cli.user_errors_exit(), cli.secure_sum_simulation():
    summaries = experiment.run_settings(FLAGS.root_output_dir, settings, run_one,
                                        FLAGS.fresh, log=lambda s: print(s, flush=True))
  plot(FLAGS.root_output_dir, summaries, desc,
       os.path.join(FLAGS.root_output_dir, 'accuracy_vs_rounds.png'))
  experiment.report(summaries, COLUMNS,
                    os.path.join(FLAGS.root_output_dir, 'summary.csv'),
                    f'QMGeo on {desc}, {FLAGS.rounds} rounds, δ = {FLAGS.delta:g}',
                    note='ε of the no-quantization row: ∞ (no noise).')


def entry_point():
  """The console script `tff-quant-qmgeo-mnist` (setup.py): runs `main` as
  `python -m experiments.qmgeo_mnist` does, from any folder."""
  cli.run(main, check=check_flags)


if __name__ == '__main__':
  entry_point()
