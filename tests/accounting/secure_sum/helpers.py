"""Shared helpers of the secure_sum tests: mechanisms and brute-force divergences."""

import math

import numpy as np

from tff_quant import mechanisms
from tff_quant.accounting import divergence

ORDERS = (2.0, 8.0, math.inf)


def mech(name, c=1.0, **params):
  """The registry mechanism `name` for input bound c."""
  return mechanisms.get(name).for_coordinate_bound(c, **params)


def exact(m, x, x_prime, others, alpha):
  """D_α of the secure sum, target at x vs x', the others at the given inputs."""
  rest = [(m.log_pmf(o), 1) for o in others]
  p = divergence.sum_log_pmf([(m.log_pmf(x), 1)] + rest)
  q = divergence.sum_log_pmf([(m.log_pmf(x_prime), 1)] + rest)
  return divergence.renyi_divergence(p, q, alpha)


def bound_at(curve, alpha, t):
  """The curve's bound on f_α(t): its step points' value on the step holding t²."""
  us, ys = curve.bound_points(alpha)
  return ys[np.clip(np.searchsorted(us, t**2, side='left') - 1, 0, len(ys) - 1)]
