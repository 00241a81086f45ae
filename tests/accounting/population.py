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


def vector_round_law(mech, inputs, cohort_size):
  """One round's exact law of a d-coordinate level sum over a uniform
  cohort (every cohort enumerated, shared by the coordinates), flattened."""
  dim = len(inputs[0])
  law = 0.0
  cohorts = list(itertools.combinations(range(len(inputs)), cohort_size))
  for cohort in cohorts:
    joint = np.ones(1)
    for j in range(dim):
      sums = np.ones(1)
      for i in cohort:
        sums = np.convolve(sums, mech.pmf(inputs[i][j]))
      joint = np.outer(joint, sums).ravel()
    law = law + joint
  return law / len(cohorts)


#: Two-coordinate targets on the ℓ2 sphere of radius 1 and interior, and
#: five others (all at one point of the sphere; interior and mixed), for
#: N = 6. Every input lies in the ℓ2 ball the accountant assumes: a client
#: outside it would be replaced by the target at ℓ2 distance above 2.
L2_PAIRS = (((0.6, 0.8), (-0.6, -0.8)), ((1.0, 0.0), (-1.0, 0.0)),
            ((0.7071, 0.7071), (-0.7071, -0.7071)), ((0.3, -0.2), (-0.5, 0.4)))
L2_OTHERS = (((0.7071, 0.7071),) * 5,
             ((-1.0, 0.0), (0.3, -0.7), (0.6, -0.8), (-0.2, 0.1), (0.0, 1.0)))


def worst_l2_epsilon(mech, cohort_size, rounds, delta):
  """The largest exact ε over L2_PAIRS and L2_OTHERS: `rounds` rounds, each
  a uniform cohort of `cohort_size` from the six clients."""
  worst = 0.0
  for x, x2 in L2_PAIRS:
    for others in L2_OTHERS:
      p = vector_round_law(mech, (x,) + others, cohort_size)
      q = vector_round_law(mech, (x2,) + others, cohort_size)
      worst = max(worst, true_epsilon(p, q, rounds, delta))
  return worst


def check_l2_route(accountant, rounds):
  """Checks `accountant` (N = 6, two coordinates, the ℓ2 route) against
  every cohort: its profile route is below the same round RDP curve's
  profile alone (the domination binds), at or above the exact ε of every
  run of `worst_l2_epsilon`, and within a factor 3.3 of it (a check that
  can fail)."""
  from tff_quant.accounting import composition   # pylint: disable=g-import-not-at-top
  proved = accountant.epsilon_profile(rounds)[0]
  from_rdp = composition.RoundAccountant.from_round_rdp(
      dict(accountant.rdp), accountant.n, accountant.population,
      accountant.delta, 2, 'RDP only').epsilon_profile(rounds)[0]
  assert proved < from_rdp
  worst = worst_l2_epsilon(accountant.mech, accountant.n, rounds,
                           accountant.delta)
  assert 0 < worst <= proved
  assert worst > 0.3 * proved
