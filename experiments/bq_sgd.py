"""BQ-SGD (paper 003, Alg. 1, Tables II-III): distributed SGD with per-example ℓ∞
clipping and Binomial-noise-aided Quantization over TFF secure sum.

4 clients with IID shards, batch 32 per client per round, per-example ℓ∞ clip C
(vectorised per-example gradients), BQ(C, s, m) on the batch-mean gradient, the
unbiased decode of the secure sum, server SGD. (s, m) come from the bit budget b
and the target ε by tff_quant.accounting.bounds.bq_parameters (Lemma 1 with the
paper's d_p in place of d, as the paper does), or from --s/--m.
Rows: "table2" = fixed b, several ε; "table3" = fixed ε, several b; each row is a
resumable run under --root_output_dir/<dataset>/<row>.

Privacy reported per row: the paper's Lemma-1 ε (with d_p and with the true d) and
what tff_quant.accounting says of the mechanism that ran: BQ's supports at ±C
differ (2s of the 2s+m+1 outputs), so its exact RDP is infinite at every order;
only an (ε, δ) guarantee with δ >= ~2^-m exists, and the Lemma-1 ε is not one
(it is a per-coordinate local bound times d, see README).

  python -m experiments.bq_sgd --dataset=mnist --rows=table2
"""

import math
import os

from absl import app
from absl import flags

from tff_quant import data, mechanisms, models
from tff_quant.accounting import bounds, divergence
from tff_quant.program import cli, experiment

# Paper Table I settings and the Table II / III rows: (b, ε, s, m, accuracy %).
PAPER = {
    'mnist': dict(model='lenet5', clip=0.0015, lr=0.006, iterations=1000, dp=3000,
                  local=15000,
                  table2=[(8, 1.72, 1, 251, 94.20), (8, 3.44, 2, 251, 96.73),
                          (8, 8.72, 4, 247, 97.38)],
                  table3=[(8, 3.44, 2, 251, 96.73), (10, 3.44, 4, 1050, 96.91),
                          (12, 3.44, 6, 4079, 96.99)]),
    'fashion_mnist': dict(model='alexnet_small', clip=0.003, lr=0.006,
                          iterations=3000, dp=30000, local=15000,
                          table2=[(10, 86.22, 10, 1003, 79.11),
                                  (10, 112.42, 13, 997, 84.16),
                                  (10, 138.79, 16, 991, 87.02)],
                          table3=[(10, 112.42, 13, 997, 84.16),
                                  (12, 112.42, 26, 4043, 84.71),
                                  (14, 112.42, 52, 16279, 85.02)]),
}

FLAGS = flags.FLAGS
flags.DEFINE_enum('dataset', 'mnist', list(PAPER), 'mnist: LeNet-5; fashion_mnist: '
                  'the small AlexNet-style CNN (models.alexnet_small).')
flags.DEFINE_list('rows', ['table2'], 'table2 and/or table3 (the paper\'s rows), '
                  'and/or "none" (no quantization, same clipping).')
flags.DEFINE_integer('rounds', None, 'Iterations (default: the paper\'s 1000 MNIST, '
                     '3000 Fashion-MNIST).', lower_bound=1)
flags.DEFINE_float('learning_rate', None, 'Server step (default: the paper\'s 0.006).')
flags.DEFINE_float('clip', None, 'Per-example ℓ∞ clip C (default: the paper\'s).')
flags.DEFINE_integer('batch_size', 32, 'Batch per client per round.', lower_bound=1)
flags.DEFINE_integer('num_clients', 4, 'Clients (all in every round).', lower_bound=1)
flags.DEFINE_bool('paper_sm', True, 'Use the paper\'s (s, m) (default); False: '
                  'compute them with bounds.bq_parameters for this run\'s local '
                  'dataset size (infeasible on the 5k MNIST subset).')
flags.DEFINE_integer('eval_every', 50, 'Evaluate every k rounds.', lower_bound=1)
flags.DEFINE_integer('seed', 0, 'Split / batch sampling seed.', lower_bound=0)
flags.DEFINE_integer('noise_seed', None, 'Reproducible BQ noise (experiments only).',
                     lower_bound=0)
flags.DEFINE_bool('fresh', False, 'Discard existing runs instead of resuming.')
flags.DEFINE_string('root_output_dir', 'results/bq_sgd', 'Output folder.')


def rows_to_run(names, paper):
  out = []
  for name in names:
    if name == 'none':
      out.append(('none', None))
    elif name in ('table2', 'table3'):
      for b, eps, s, m, acc in paper[name]:
        row = f'b{b}_eps{eps:g}'
        if row not in [r for r, _ in out]:
          out.append((row, (b, eps, s, m, acc)))
    else:
      raise ValueError(f'--rows entries must be table2, table3 or none, got {name!r}')
  return out


def privacy(mech, cfg, dim, local_size):
  """The paper's Lemma-1 ε (d_p and true d) and the exact per-round RDP (inf here)."""
  d2 = divergence.renyi_divergence_of_sum(mech, 2.0, cfg['num_clients']).value
  return dict(
      lemma1_eps_dp=bounds.bq_lemma_1(mech, cfg['dp'], cfg['batch_size'], local_size),
      lemma1_eps_true_d=bounds.bq_lemma_1(mech, dim, cfg['batch_size'], local_size),
      exact_rdp_per_round_alpha2=dim * d2,
      support_gap_mass=float(2 * mech.s * 0.5**mech.m) if mech.m < 1075 else 0.0)


COLUMNS = [
    experiment.Column('row', 'row'),
    experiment.Column('rounds', 'rounds'),
    experiment.Column('final_test_accuracy', 'acc here', '{:.4f}'.format),
    experiment.Column('bits', 'bits'),
    experiment.Column('target_epsilon', 'target ε'),
    experiment.Column('s', 's here'),
    experiment.Column('m', 'm here'),
    experiment.Column('paper_s', 'paper s'),
    experiment.Column('paper_m', 'paper m'),
    experiment.Column('lemma1_rule_sm', 'Lemma-1 rule (s, m)'),
    experiment.Column('paper_accuracy', 'paper acc', '{:.4f}'.format),
    experiment.Column('lemma1_eps_dp', 'Lemma-1 ε (d_p)', '{:.3g}'.format),
    experiment.Column('lemma1_eps_true_d', 'Lemma-1 ε (true d)', '{:.3g}'.format),
    experiment.Column('exact_rdp_per_round_alpha2', 'exact RDP/round'),
]


def config_from_flags():
  """The run's settings: the flags, the paper's values where unset."""
  paper = PAPER[FLAGS.dataset]
  return dict(dataset=FLAGS.dataset, model=paper['model'],
              clip=FLAGS.clip or paper['clip'],
              learning_rate=FLAGS.learning_rate or paper['lr'],
              rounds=FLAGS.rounds or paper['iterations'],
              batch_size=FLAGS.batch_size, num_clients=FLAGS.num_clients,
              dp=paper['dp'], seed=FLAGS.seed, noise_seed=FLAGS.noise_seed,
              paper_sm=FLAGS.paper_sm)


def check_flags():
  """The rows of the flags, refused before TensorFlow starts where a flag
  is bad (`cli.run`'s check; main checks again).

  Returns:
    `rows_to_run(--rows)`.

  Raises:
    TypeError, ValueError: naming the flag and its allowed values.
  """
  rows = rows_to_run(FLAGS.rows, PAPER[FLAGS.dataset])
  cli.check_flags(dict(config_from_flags(), eval_every=FLAGS.eval_every),
                  at_least_one=('rounds', 'batch_size', 'num_clients',
                                'eval_every'),
                  positive=('clip', 'learning_rate'))
  return rows


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
  cfg = config_from_flags()
  with cli.user_errors_exit():
    rows = check_flags()
    (xtr, ytr), test, desc = data.load_image_arrays(FLAGS.dataset)
    clients = distributed_sgd.split_among_clients(xtr, ytr, cfg['num_clients'],
                                                  cfg['seed'])
    local_size = len(clients[0][1])
    if cfg['batch_size'] > local_size:
      raise ValueError(f'--batch_size must be <= {local_size}, got {cfg["batch_size"]}')
    settings = []
    for row, spec in rows:
      mech = None
      if spec is not None:
        b, eps, s_paper, m_paper, _ = spec
        try:  # the paper's own rule, with this run's local dataset size
          rule = bounds.bq_parameters(b, eps, cfg['dp'], cfg['batch_size'], local_size)
        except ValueError:
          if not cfg['paper_sm']:
            raise
          rule = None
        s, m = (s_paper, m_paper) if cfg['paper_sm'] else rule
        mech = mechanisms.BQ(cfg['clip'], s, m)
        spec = spec + (rule,)
      settings.append(experiment.Setting(row, dict(cfg, row=row, data=desc),
                                         (mech, spec)))
  keras_fn = lambda: models.get(cfg['model'], (28, 28, 1), 10)
  dim = models.num_params(keras_fn())
  spec_tf = (tf.TensorSpec([None, 28, 28, 1], tf.float32), tf.TensorSpec([None], tf.int32))
  print(f'data: {desc}; {cfg["num_clients"]} IID clients x {local_size}; '
        f'{cfg["model"]} d = {dim}; batch {cfg["batch_size"]}, C = {cfg["clip"]}, '
        f'lr {cfg["learning_rate"]}, {cfg["rounds"]} rounds', flush=True)

  def run_one(setting, run_dir):
    mech, spec = setting.payload
    if mech is None:
      factory, eps = tff.aggregators.UnweightedMeanFactory(), {}
    else:
      factory = quantization_factory.QuantizationFactory(
          mech, max_clients_per_round=cfg['num_clients'], seed=cfg['noise_seed'],
          diagnostics=True)   # a simulation: clipped fractions logged
      eps = privacy(mech, cfg, dim, local_size)
    process = distributed_sgd.build_distributed_sgd(
        keras_fn, spec_tf, factory, cfg['learning_rate'], 'per_example_linf',
        cfg['clip'])
    print(f'{setting.name}: {mech if mech else "no quantization"}', flush=True)
    acc, _ = distributed_sgd.train(process, keras_fn, clients, test, cfg['rounds'],
                                   cfg['batch_size'], run_dir, cfg['seed'],
                                   FLAGS.eval_every, log=lambda s: print(s, flush=True))
    summary = dict(row=setting.name, data=desc, dim=dim, rounds=cfg['rounds'],
                   final_test_accuracy=acc, **eps)
    if mech is not None:
      b, target, s_p, m_p, acc_p, rule = spec
      summary.update(bits=b, target_epsilon=target, s=mech.s, m=mech.m,
                     lemma1_rule_sm=str(rule) if rule else 'infeasible',
                     paper_s=s_p, paper_m=m_p, paper_accuracy=acc_p / 100,
                     bits_used=math.ceil(math.log2(mech.num_levels)))
    return summary

  root = os.path.join(FLAGS.root_output_dir, FLAGS.dataset)
  with cli.user_errors_exit(), cli.secure_sum_simulation():
    summaries = experiment.run_settings(root, settings, run_one, FLAGS.fresh,
                                        log=lambda s: print(s, flush=True))
  experiment.report(summaries, COLUMNS, os.path.join(root, 'summary.csv'),
                    f'BQ-SGD on {desc}, {cfg["rounds"]} rounds',
                    note='Exact RDP of the no-quantization row: ∞ (no noise).')


def entry_point():
  """The console script `tff-quant-bq-sgd` (setup.py): runs `main` as
  `python -m experiments.bq_sgd` does, from any folder."""
  cli.run(main, check=check_flags)


if __name__ == '__main__':
  entry_point()
