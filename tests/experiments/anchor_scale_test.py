"""Tests for experiments/anchor_scale.py: --help, the plan refused before the
cells exist and listed from a cells.json (every seed, the Gaussian first, a
registry mechanism at its wire budget, TFF's peer at its bits), and a start
stopped by --max_seconds that ends its run and its workers."""

import json
import os

from tests.experiments import binaries
from tff_quant.program import fl_validation as fv

MODULE = 'experiments.anchor_scale'


def _cells_json(path, **setting):
  pbm = fv.BudgetAnswer(1.05, 1, 7, json.dumps(dict(clip=0.002, num_levels=2,
                                                     theta=0.05)))
  peer = fv.BudgetAnswer(1.3, 12, 12, json.dumps(dict(noise_multiplier=1.7,
                                                      bits=12)), True)
  cells = [fv.MechanismCell('pbm', 10.0, 7, 'w_hi', pbm, 1.06),
           fv.MechanismCell('tff_dgauss', 10.0, 12, 'fixed', peer, 1.31)]
  base = dict(dataset='fashion_mnist', model='emnist_cnn', rounds=1500,
              clients_per_round=100, total_clients=3400, delta=1 / 3400,
              epsilon=10.0, coordinate_clip_multiple=3.0, rotate=True,
              split_seed=0, eval_every=50, dim=2**21,
              gaussian_noise_multiplier=0.9,
              training=dict(clip_norm=0.03, client_lr=0.05, server_lr=1.0,
                            server_momentum=0.0,
                            server_lr_schedule='constant'))
  base.update(setting)
  path.mkdir(parents=True, exist_ok=True)
  (path / 'cells.json').write_text(json.dumps(fv.cells_json(cells, [], base)))


def test_help_names_the_flags():
  got = binaries.run(MODULE, ['--help'], timeout=120)
  assert got.returncode == 0, got.stderr[-2000:]
  for flag in ('--choose', '--plan', '--measure_rounds', '--max_seconds'):
    assert flag in got.stdout


def test_plan_needs_the_cells_then_lists_every_run(tmp_path):
  out = tmp_path / 'a'
  early = binaries.run(MODULE, [f'--output_dir={out}', '--plan'], timeout=120)
  assert early.returncode == 2 and 'run --choose first' in early.stderr
  _cells_json(out)
  got = binaries.run(MODULE, [f'--output_dir={out}', '--plan'], timeout=120)
  assert got.returncode == 0, got.stderr[-2000:]
  lines = got.stdout.splitlines()
  assert len(lines) == 9   # 3 cells x seeds 200-202
  assert '--mechanism=gaussian' in lines[0] and '--seed=200' in lines[0]
  assert 'noise_multiplier=0.9' in lines[0] and '--model=emnist_cnn' in lines[0]
  pbm = next(l for l in lines if 'pbm_eps10_w7_s201' in l)
  assert '--wire_bits=7' in pbm and '--rounds=1500' in pbm and 'clip=' not in pbm
  peer = next(l for l in lines if 'tff_dgauss_eps10_w12_s202' in l)
  assert 'bits=12' in peer and '--wire_bits' not in peer


def test_a_start_past_max_seconds_stops_its_run_and_workers(tmp_path):
  out = tmp_path / 'a'
  _cells_json(out, rounds=2, clients_per_round=4, total_clients=20,
              eval_every=1)
  got = binaries.run(MODULE, [f'--output_dir={out}', '--seeds=200',
                              '--max_seconds=3'], timeout=300)
  assert got.returncode == 0, got.stderr[-2000:]
  assert 'stopped after --max_seconds=3' in got.stdout
  assert 'start again to resume' in got.stdout
  assert got.leftover_workers == []
  assert not os.path.exists(out / 'runs' / 'gaussian_eps10_s200' /
                            'summary.json')


def test_measuring_a_few_rounds_writes_the_cost_and_names_the_data(tmp_path):
  """Without TFF's EMNIST cache the Gaussian cell trains on Fashion-MNIST
  (said in the record); one round of 4 clients here."""
  out = tmp_path / 'a'
  got = binaries.run(MODULE, [f'--output_dir={out}', '--measure_rounds=1',
                              '--clients_per_round=4', '--total_clients=20',
                              f'--emnist_cache_dir={tmp_path / "none"}'],
                     timeout=600)
  assert got.returncode == 0, got.stderr[-2000:]
  assert got.stdout.splitlines()[-1].startswith('fashion_mnist: ')
  record = json.loads((out / 'measured_cost.json').read_text())
  assert record['dataset'] == 'fashion_mnist' and record['model'] == 'emnist_cnn'
  assert record['rounds_measured'] == 1 and record['seconds_per_round'][0] > 0
  assert record['runs'] == 15 and got.leftover_workers == []
