"""Brute force over a tiny population, shared by the accounting tests: the
exact law of rounds that sample a fixed-size cohort without replacement
(every cohort enumerated), and the exact (ε, δ) of two such runs."""

import itertools
import math

import numpy as np


def round_law(mech, inputs, cohort_size):
  """The exact law of one round's level sum: a uniform n-subset of `inputs`
  (every cohort enumerated), each member's output summed."""
  pmfs = [mech.pmf(x) for x in inputs]
  cohorts = list(itertools.combinations(range(len(inputs)), cohort_size))
  law = np.zeros(cohort_size * (mech.num_levels - 1) + 1)
  for cohort in cohorts:
    s = np.ones(1)
    for i in cohort:
      s = np.convolve(s, pmfs[i])
    law += s
  return law / len(cohorts)


def run_laws(p, q, rounds):
  """The exact laws of `rounds` independent rounds of laws p and q."""
  big_p, big_q = p, q
  for _ in range(rounds - 1):
    big_p, big_q = np.outer(big_p, p).ravel(), np.outer(big_q, q).ravel()
  return big_p, big_q


def true_delta(p, q, eps):
  """max over both orders of Σ (P − e^ε Q)_+: the exact δ at ε."""
  return max(np.maximum(a - math.exp(eps) * b, 0).sum()
             for a, b in ((p, q), (q, p)))


def true_epsilon(p, q, rounds, delta):
  """The least ε with δ(ε) = Σ (P - e^ε Q)_+ <= delta in both directions, P
  and Q the exact laws of `rounds` independent rounds (bisection to 1e-9)."""
  big_p, big_q = run_laws(p, q, rounds)

  def one_way(a, b):
    lo, hi = 0.0, 60.0
    if np.maximum(a - b, 0).sum() <= delta:
      return 0.0
    while hi - lo > 1e-9:
      mid = (lo + hi) / 2
      lo, hi = ((lo, mid) if np.maximum(a - math.exp(mid) * b, 0).sum() <= delta
                else (mid, hi))
    return hi
  return max(one_way(big_p, big_q), one_way(big_q, big_p))
