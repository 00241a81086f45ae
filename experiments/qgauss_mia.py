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
# Import TF before absl parses flags (TF 2.14 Keras otherwise builds in graph mode).
import tensorflow as tf
import tensorflow_federated as tff

from tff_quant import aggregators, audit, models

from tff_quant.program import cli, results_io
from tff_quant.data import datasets

NONE_LEVELS = 65536

FLAGS = flags.FLAGS
flags.DEFINE_list('levels', ['2', '8', '32', 'none'],
                  'k values for the sweep at fixed --noise_multiplier.')
flags.DEFINE_float('noise_multiplier', 0.1, 'z = σ / Cq for the k sweep.')
flags.DEFINE_list('sigma_sweep', ['0.03', '1.0', '3', '10'], 'Further z values ...')
flags.DEFINE_list('sigma_levels', ['16', 'none'], '... for these k (Fig. 5).')
flags.DEFINE_bool('clean', True, 'Also run the noise-free clipped mean reference.')
flags.DEFINE_integer('num_shadows', 4, 'Shadow (out) models per setting, >= 2.')
flags.DEFINE_integer('members', 500, 'Target training examples (= non-members).')
flags.DEFINE_integer('num_clients', 10, 'Clients (all in every round), IID shards.')
flags.DEFINE_integer('rounds', 20, 'FedAvg rounds per model.')
flags.DEFINE_integer('local_epochs', 5, 'Client epochs per round.')
flags.DEFINE_integer('batch_size', 10, 'Client batch size.')
flags.DEFINE_float('client_lr', 0.1, 'Client SGD learning rate.')
flags.DEFINE_float('clip_norm', 1.0, 'ℓ2 clip of each client update.')
flags.DEFINE_string('model', 'small_cnn', 'Keras model (tff_quant.models).')
flags.DEFINE_integer('seed', 0, 'Candidate / shadow sampling seed.')
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
  arrays, d = datasets.load_fashion_mnist_arrays()
  x, y = arrays['train']
  x = (x.astype(np.float32) / 255.0)[..., None]
  y = y.astype(np.int32)
  perm = np.random.default_rng(seed).permutation(len(y))
  if not 10 <= members <= len(y) // 4:
    raise ValueError(f'--members must be in [10, {len(y) // 4}], got {members}')
  mem, non = perm[:members], perm[members:2 * members]
  pool = perm[2 * members:]
  tx, ty = arrays['test']
  return (dict(members=(x[mem], y[mem]), non_members=(x[non], y[non]),
               pool=(x[pool], y[pool]),
               test=((tx.astype(np.float32) / 255.0)[..., None], ty.astype(np.int32))),
          f'Fashion-MNIST (real, {d}); {members} members / {members} non-members / '
          f'shadow pool of {len(pool)}, seed {seed}')


def train_model(x, y, k, z, seed):
  """FedAvg on (x, y) split over the clients; returns the Keras model."""
  n = FLAGS.num_clients
  shards = np.array_split(np.random.default_rng(seed).permutation(len(y)), n)
  spec = (tf.TensorSpec([None, 28, 28, 1], tf.float32), tf.TensorSpec([None], tf.int32))
  keras_fn = lambda: models.get(FLAGS.model, (28, 28, 1), 10)

  def model_fn():
    return tff.learning.models.from_keras_model(
        keras_fn(), input_spec=spec,
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))

  if k is None:
    factory = aggregators.clipped_mean_factory(FLAGS.clip_norm)
  else:
    factory = aggregators.quantized_gaussian_factory(
        FLAGS.clip_norm, k, z, max_clients_per_round=n, seed=seed)
  process = tff.learning.algorithms.build_unweighted_fed_avg(
      model_fn, client_optimizer_fn=tff.learning.optimizers.build_sgdm(FLAGS.client_lr),
      model_aggregator=factory)
  data = [tf.data.Dataset.from_tensor_slices((x[s], y[s])).shuffle(len(s), seed=seed)
          .repeat(FLAGS.local_epochs).batch(FLAGS.batch_size) for s in shards]
  state = process.initialize()
  for _ in range(FLAGS.rounds):
    state = process.next(state, data).state
  model = keras_fn()
  process.get_model_weights(state).assign_weights_to(model)
  return model


def run_setting(name, k, z, split, out_dir):
  """Target + shadows for one setting; writes and returns its result dict."""
  t0 = time.time()
  cand_x = np.concatenate([split['members'][0], split['non_members'][0]])
  cand_y = np.concatenate([split['members'][1], split['non_members'][1]])
  is_member = np.arange(len(cand_y)) < len(split['members'][1])
  target = train_model(*split['members'], k, z, FLAGS.seed)
  phi = lambda m: audit.logit_confidence(m.predict(cand_x, batch_size=1000, verbose=0),
                                         cand_y)
  target_phi = phi(target)
  test_acc = float(np.mean(np.argmax(target.predict(
      split['test'][0], batch_size=1000, verbose=0), 1) == split['test'][1]))
  shadows = []
  px, py = split['pool']
  for j in range(FLAGS.num_shadows):
    idx = np.random.default_rng([FLAGS.seed, j + 1]).choice(
        len(py), len(split['members'][1]), replace=False)
    shadows.append(phi(train_model(px[idx], py[idx], k, z, FLAGS.seed + j + 1)))
  mu, sigma = audit.fit_out_distribution(np.stack(shadows))
  metrics = audit.attack_metrics(audit.offline_lira_scores(target_phi, mu, sigma),
                                 is_member)
  result = dict(setting=name, levels=k, noise_multiplier=z, test_accuracy=test_acc,
                num_shadows=FLAGS.num_shadows, seconds=time.time() - t0, **metrics)
  results_io.write_json(os.path.join(out_dir, 'settings', f'{name}.json'), result)
  return result


def plot(rows, path):
  """MIA accuracy and AUC vs k at fixed z (Fig. 4) and vs z per k (Fig. 5)."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
  label = lambda k: 'none' if k == NONE_LEVELS else str(k)
  fixed = [r for r in rows if r['levels'] and r['noise_multiplier'] == FLAGS.noise_multiplier]
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
  a1.set_xlabel(f'quantization levels k (z = {FLAGS.noise_multiplier:g})')
  a2.set_xscale('log')
  a2.set_xlabel('noise multiplier z = σ / Cq')
  a2.set_ylabel('MIA accuracy')
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  with cli.user_errors_exit():
    settings = settings_from_flags()
    cli.check_flags(FLAGS, at_least_one=('num_clients', 'rounds', 'local_epochs',
                                         'batch_size'),
                    positive=('client_lr', 'clip_norm'))
    if FLAGS.num_shadows < 2:
      raise ValueError(f'--num_shadows must be >= 2, got {FLAGS.num_shadows}')
    split, desc = split_data(FLAGS.members, FLAGS.seed)
  out_dir = FLAGS.root_output_dir
  config = {k: getattr(FLAGS, k) for k in (
      'num_shadows', 'members', 'num_clients', 'rounds', 'local_epochs', 'batch_size',
      'client_lr', 'clip_norm', 'model', 'seed')}
  print(f'data: {desc}; model {FLAGS.model}; {FLAGS.num_clients} clients x '
        f'{FLAGS.rounds} rounds x {FLAGS.local_epochs} local epochs; '
        f'{FLAGS.num_shadows} shadow models per setting', flush=True)
  rows = []
  with cli.secure_sum_simulation():
    for name, k, z in settings:
      path = os.path.join(out_dir, 'settings', f'{name}.json')
      done = None
      if os.path.exists(path):
        import json  # pylint: disable=g-import-not-at-top
        with open(path) as f:
          done = json.load(f)
        if any(done.get('config', {}).get(c) != v for c, v in config.items()):
          done = None
      if done is None:
        done = run_setting(name, k, z, split, out_dir)
        done['config'] = config
        results_io.write_json(path, done)
      print(f'{name}: MIA acc {done["accuracy"]:.4f} AUC {done["auc"]:.4f} '
            f'TPR@1%FPR {done["tpr_at_1pct_fpr"]:.4f} test acc '
            f'{done["test_accuracy"]:.4f} ({done["seconds"]:.0f} s)', flush=True)
      rows.append(done)
  keys = ['setting', 'levels', 'noise_multiplier', 'accuracy', 'auc',
          'tpr_at_1pct_fpr', 'test_accuracy', 'num_shadows']
  results_io.write_csv(os.path.join(out_dir, 'summary.csv'), keys,
                       [[r.get(k) for k in keys] for r in rows])
  plot(rows, os.path.join(out_dir, 'mia.png'))
  print(f'\n{desc}\n| setting | MIA accuracy | AUC | TPR @ 1% FPR | test acc |\n'
        '|---|---|---|---|---|')
  for r in rows:
    print(f'| {r["setting"]} | {r["accuracy"]:.4f} | {r["auc"]:.4f} | '
          f'{r["tpr_at_1pct_fpr"]:.4f} | {r["test_accuracy"]:.4f} |')


if __name__ == '__main__':
  app.run(main)
