"""Quantized Gaussian FedAvg + offline LiRA membership inference (paper 000, Alg. 1, Sec. IV).

FedAvg where every client update goes through the quantized-Gaussian factory
(ℓ2 clip, c∞ = clip/√d, + N(0, σ²) with σ = z·Cq, k-level stochastic quantizer,
secure sum). The target model is trained on the "members"; K shadow models are
trained the same way on random subsets of a disjoint shadow pool (so every
candidate is "out" for them: offline LiRA, tff_quant.audit.lira). Reported per
setting: attack accuracy, AUC and TPR at 1% FPR on members vs an equal number of
non-members, and the target's test accuracy. Sweeps: k at fixed z (Fig. 4) and z
for a few k (Fig. 5). "none" = no quantization (k = 65,536 levels: quantization
error negligible; the Gaussian noise remains); "clean" = clipped mean, no noise.

The paper's ResNet-18 / CIFAR-10 does not fit here: Fashion-MNIST (real) with the
small CNN, few clients and few shadow models (--num_shadows, default 4).
Each finished setting is saved; a restart skips it (same flags) and resumes.

  python -m experiments.qgauss_mia
"""

import os
import time

from absl import app
from absl import flags
import numpy as np

from tff_quant import aggregators, audit, data, models
from tff_quant.common import validation
from tff_quant.program import cli, experiment, round_loop

NONE_LEVELS = 65536

FLAGS = flags.FLAGS
flags.DEFINE_list('levels', ['2', '8', '32', 'none'],
                  'k values for the sweep at fixed --noise_multiplier.')
flags.DEFINE_float('noise_multiplier', 0.1, 'z = σ / Cq for the k sweep.')
flags.DEFINE_list('sigma_sweep', ['0.03', '1.0', '3', '10'], 'Further z values ...')
flags.DEFINE_list('sigma_levels', ['16', 'none'], '... for these k (Fig. 5).')
flags.DEFINE_bool('clean', True, 'Also run the noise-free clipped mean reference.')
flags.DEFINE_integer('num_shadows', 4, 'Shadow (out) models per setting, >= 2.',
                     lower_bound=2)
flags.DEFINE_integer('members', 500, 'Target training examples (= non-members).',
                     lower_bound=1)
flags.DEFINE_integer('num_clients', 10, 'Clients (all in every round), IID shards.',
                     lower_bound=1)
flags.DEFINE_integer('rounds', 20, 'FedAvg rounds per model.', lower_bound=1)
flags.DEFINE_integer('local_epochs', 5, 'Client epochs per round.', lower_bound=1)
flags.DEFINE_integer('batch_size', 10, 'Client batch size.', lower_bound=1)
flags.DEFINE_float('client_lr', 0.1, 'Client SGD learning rate.')
flags.DEFINE_float('clip_norm', 1.0, 'ℓ2 clip of each client update.')
flags.DEFINE_string('model', 'small_cnn', 'Keras model (tff_quant.models).')
flags.DEFINE_integer('seed', 0, 'Candidate / shadow sampling seed.', lower_bound=0)
flags.DEFINE_string('root_output_dir', 'results/qgauss_mia', 'Output folder.')


def parse_levels(values, name):
  out = []
  for v in values:
    if v == 'none':
      out.append(NONE_LEVELS)
      continue
    try:
      k = int(v)
    except ValueError:
      raise ValueError(f'--{name} entries must be integers >= 2 or "none", got {v!r}') from None
    if k < 2:
      raise ValueError(f'--{name} entries must be integers >= 2 or "none", got {v!r}')
    out.append(k)
  return out


def settings_from_flags():
  """[(name, k or None, z or None)]: k sweep, σ sweep, clean reference."""
  zs = []
  for v in FLAGS.sigma_sweep:
    try:
      zs.append(float(v))
    except ValueError:
      raise ValueError(f'--sigma_sweep entries must be numbers > 0, got {v!r}') from None
  if not FLAGS.noise_multiplier > 0 or any(z <= 0 for z in zs):
    raise ValueError('--noise_multiplier and --sigma_sweep must be > 0')
  label = lambda k: 'none' if k == NONE_LEVELS else str(k)
  out = [(f'k{label(k)}_z{FLAGS.noise_multiplier:g}', k, FLAGS.noise_multiplier)
         for k in parse_levels(FLAGS.levels, 'levels')]
  for k in parse_levels(FLAGS.sigma_levels, 'sigma_levels'):
    for z in zs:
      name = f'k{label(k)}_z{z:g}'
      if name not in [o[0] for o in out]:
        out.append((name, k, z))
  if FLAGS.clean:
    out.append(('clean', None, None))
  return out


def split_data(members: int, seed: int):
  """Members, non-members, shadow pool (disjoint) and test set of Fashion-MNIST."""
  (x, y), test, desc = data.load_image_arrays('fashion_mnist')
  perm = np.random.default_rng(seed).permutation(len(y))
  if not 10 <= members <= len(y) // 4:
    raise ValueError(f'--members must be in [10, {len(y) // 4}], got {members}')
  mem, non = perm[:members], perm[members:2 * members]
  pool = perm[2 * members:]
  return (dict(members=(x[mem], y[mem]), non_members=(x[non], y[non]),
               pool=(x[pool], y[pool]), test=test),
          f'{desc}; {members} members / {members} non-members / '
          f'shadow pool of {len(pool)}, seed {seed}')


def train_model(x, y, k, z, seed, cfg):
  """FedAvg on (x, y) split over cfg's clients; returns the Keras model."""
  # TensorFlow is imported by cli.run before absl starts (TF 2.14's Keras
  # built by a TensorFlow imported inside app.run fails).
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  n = cfg['num_clients']
  shards = np.array_split(np.random.default_rng(seed).permutation(len(y)), n)
  spec = (tf.TensorSpec([None, 28, 28, 1], tf.float32), tf.TensorSpec([None], tf.int32))
  keras_fn = lambda: models.get(cfg['model'], (28, 28, 1), 10)
  if k is None:
    factory = aggregators.clipped_mean_factory(cfg['clip_norm'])
  else:
    factory = aggregators.quantized_gaussian_factory(
        cfg['clip_norm'], k, z, max_clients_per_round=n, seed=seed)
  process = tff.learning.algorithms.build_unweighted_fed_avg(
      models.tff_model_fn(keras_fn, spec, accuracy=False),
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(cfg['client_lr']),
      model_aggregator=factory)
  shuffled = [tf.data.Dataset.from_tensor_slices((x[s], y[s])).shuffle(len(s), seed=seed)
              .repeat(cfg['local_epochs']).batch(cfg['batch_size']) for s in shards]
  state = process.initialize()
  for _ in range(cfg['rounds']):
    state = process.next(state, shuffled).state
  model = keras_fn()
  process.get_model_weights(state).assign_weights_to(model)
  return model


def run_setting(k, z, split, cfg):
  """Target + shadows for one setting; returns its result dict."""
  t0 = time.time()
  cand_x = np.concatenate([split['members'][0], split['non_members'][0]])
  cand_y = np.concatenate([split['members'][1], split['non_members'][1]])
  is_member = np.arange(len(cand_y)) < len(split['members'][1])
  target = train_model(*split['members'], k, z, cfg['seed'], cfg)
  phi = lambda m: audit.logit_confidence(m.predict(cand_x, batch_size=1000, verbose=0),
                                         cand_y)
  target_phi = phi(target)
  test_acc = float(np.mean(np.argmax(target.predict(
      split['test'][0], batch_size=1000, verbose=0), 1) == split['test'][1]))
  shadows = []
  px, py = split['pool']
  for j in range(cfg['num_shadows']):
    idx = np.random.default_rng([cfg['seed'], j + 1]).choice(
        len(py), len(split['members'][1]), replace=False)
    shadows.append(phi(train_model(px[idx], py[idx], k, z, cfg['seed'] + j + 1, cfg)))
  mu, sigma = audit.fit_out_distribution(np.stack(shadows))
  metrics = audit.attack_metrics(audit.offline_lira_scores(target_phi, mu, sigma),
                                 is_member)
  return dict(levels=k, noise_multiplier=z, test_accuracy=test_acc,
              num_shadows=cfg['num_shadows'], seconds=time.time() - t0, **metrics)


def plot(rows, fixed_z, path):
  """MIA accuracy and AUC vs k at z = fixed_z (Fig. 4) and vs z per k (Fig. 5)."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
  label = lambda k: 'none' if k == NONE_LEVELS else str(k)
  fixed = [r for r in rows if r['levels'] and r['noise_multiplier'] == fixed_z]
  fixed.sort(key=lambda r: r['levels'])
  for key, style in (('accuracy', 'o-'), ('auc', 's--')):
    a1.plot([label(r['levels']) for r in fixed], [r[key] for r in fixed], style,
            label=f'MIA {key}')
  for k in sorted({r['levels'] for r in rows if r['levels']}):
    pts = sorted((r['noise_multiplier'], r['accuracy']) for r in rows
                 if r['levels'] == k)
    if len(pts) > 1:
      a2.plot(*zip(*pts), 'o-', label=f'k = {label(k)}')
  clean = [r for r in rows if r['levels'] is None]
  for ax in (a1, a2):
    if clean:
      ax.axhline(clean[0]['accuracy'], color='gray', ls=':', label='clean (no noise)')
    ax.axhline(0.5, color='k', lw=0.5)
    ax.set_ylabel('membership inference')
    ax.legend(fontsize=7)
  a1.set_xlabel(f'quantization levels k (z = {fixed_z:g})')
  a2.set_xscale('log')
  a2.set_xlabel('noise multiplier z = σ / Cq')
  a2.set_ylabel('MIA accuracy')
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


COLUMNS = [
    experiment.Column('setting', 'setting'),
    experiment.Column('levels', 'k'),
    experiment.Column('noise_multiplier', 'z'),
    experiment.Column('accuracy', 'MIA accuracy', '{:.4f}'.format),
    experiment.Column('auc', 'AUC', '{:.4f}'.format),
    experiment.Column('tpr_at_1pct_fpr', 'TPR @ 1% FPR', '{:.4f}'.format),
    experiment.Column('test_accuracy', 'test acc', '{:.4f}'.format),
    experiment.Column('num_shadows', 'shadows'),
]


def check_flags():
  """The settings of the flags, refused before TensorFlow starts where a
  flag is bad or a setting's folder holds a started run of other settings
  (`cli.run`'s check; main checks again).

  Returns:
    `settings_from_flags()`.

  Raises:
    TypeError, ValueError: naming the flag and its allowed values.
  """
  setting_list = settings_from_flags()
  cli.check_flags(FLAGS, at_least_one=('num_clients', 'rounds', 'local_epochs',
                                       'batch_size'),
                  positive=('client_lr', 'clip_norm'))
  validation.check_integer('--num_shadows', FLAGS.num_shadows, 2)
  cfg = config_from_flags()
  for name, k, z in setting_list:   # a folder of other settings: refused here
    round_loop.check_run_dir(os.path.join(FLAGS.root_output_dir, name),
                             setting_config(cfg, k, z), fresh=False)
  return setting_list


def config_from_flags():
  """The training every setting shares, from the flags."""
  return {k: getattr(FLAGS, k) for k in (
      'num_shadows', 'members', 'num_clients', 'rounds', 'local_epochs',
      'batch_size', 'client_lr', 'clip_norm', 'model', 'seed')}


def setting_config(cfg, k, z):
  """What defines one setting's folder (its config.json)."""
  return dict(cfg, levels=k, noise_multiplier=z)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  with cli.user_errors_exit():
    setting_list = check_flags()
    split, desc = split_data(FLAGS.members, FLAGS.seed)
  cfg = config_from_flags()
  print(f'data: {desc}; model {cfg["model"]}; {cfg["num_clients"]} clients x '
        f'{cfg["rounds"]} rounds x {cfg["local_epochs"]} local epochs; '
        f'{cfg["num_shadows"]} shadow models per setting', flush=True)
  settings = [experiment.Setting(name, setting_config(cfg, k, z), (k, z))
              for name, k, z in setting_list]

  def run_one(setting, run_dir):
    del run_dir  # nothing to resume inside one setting (minutes each)
    done = run_setting(*setting.payload, split, cfg)
    print(f'{setting.name}: MIA acc {done["accuracy"]:.4f} AUC {done["auc"]:.4f} '
          f'TPR@1%FPR {done["tpr_at_1pct_fpr"]:.4f} test acc '
          f'{done["test_accuracy"]:.4f} ({done["seconds"]:.0f} s)', flush=True)
    return done

  out_dir = FLAGS.root_output_dir
  with cli.user_errors_exit(), cli.secure_sum_simulation():
    rows = experiment.run_settings(out_dir, settings, run_one,
                                   log=lambda s: print(s, flush=True))
  plot(rows, FLAGS.noise_multiplier, os.path.join(out_dir, 'mia.png'))
  experiment.report(rows, COLUMNS, os.path.join(out_dir, 'summary.csv'), desc)


def entry_point():
  """The console script `tff-quant-qgauss-mia` (setup.py): runs `main` as
  `python -m experiments.qgauss_mia` does, from any folder."""
  cli.run(main, check=check_flags)


if __name__ == '__main__':
  entry_point()
