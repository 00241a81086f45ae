"""Coordinates/second of each mechanism's encode on a 2^20 vector vs stochastic rounding.

Baseline (same run): unbiased stochastic rounding to m levels, the cheapest
possible quantizer. Target: every mechanism >= 0.3x the baseline.
  python -m benchmarks.encode_throughput
"""

import time

import numpy as np
import tensorflow as tf

from tff_quant import mechanisms
from tff_quant.mechanisms import base

DIM = 2**20
REPEATS = 11


def stochastic_rounding(x, seed, m=16, c=1.0):
  return tf.cast(base.stochastic_round((x + c) * ((m - 1) / (2 * c)), seed), tf.int32)


def throughput(fn, x):
  f = tf.function(fn)
  seed = tf.constant([1, 2], tf.int64)
  f(x, seed).numpy()  # trace + warm up
  times = []
  for i in range(REPEATS):
    s = tf.constant([1, i + 3], tf.int64)
    t0 = time.perf_counter()
    f(x, s).numpy()
    times.append(time.perf_counter() - t0)
  return DIM / float(np.median(times))


def main():
  x = tf.random.uniform([DIM], -1.0, 1.0)
  mechs = [mechanisms.build(name, 1.0, **params)
           for name, params in mechanisms.variants(num_levels=16)]
  base_rate = throughput(stochastic_rounding, x)
  print(f'encode throughput, d = 2^20 float32, median of {REPEATS}, '
        f'{tf.config.threading.get_intra_op_parallelism_threads() or "all"} threads')
  print(f'| {"mechanism":<72} | {"XLA":>3} | {"Mcoord/s":>9} | {"vs SR":>6} |')
  print(f'|{"-" * 74}|{"-" * 5}|{"-" * 11}|{"-" * 8}|')
  print(f'| {"stochastic rounding, m=16 (baseline)":<72} | {"no":>3} | '
        f'{base_rate / 1e6:9.1f} | {1.0:6.2f} |')
  for mech in mechs:
    rate = throughput(mech.encode, x)
    xla = 'yes' if mech.jit_encode else 'no'
    print(f'| {repr(mech):<72} | {xla:>3} | {rate / 1e6:9.1f} | '
          f'{rate / base_rate:6.2f} |')


if __name__ == '__main__':
  main()
