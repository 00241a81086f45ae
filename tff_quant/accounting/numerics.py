"""What the input laws' proved rounding adds to a divergence (docs/privacy.md, "Numerics").

Each mechanism states η = `log_pmf_error`: every finite entry of its computed
log-pmf is within η of the exact one, at every input (None: no proved bound;
see the mechanism). A law the accountant builds from n client laws by
products (convolutions), convex combinations (mixtures of rows, the
others' mixes) and entrywise minima or maxima (envelopes, blankets' common
parts) has each entry within e^(±nη) of the same construction on the exact
laws: each of these operations keeps a common factor bound. Then for α > 1

  Σ P^α Q^(1-α) <= e^(α·nη + (α-1)·nη) · Σ P̃^α Q̃^(1-α),

so D_α gains at most (2α-1)·nη/(α-1) (`rdp_allowance`), and D∞, a largest
log-ratio, 2nη. Every bound the accountant forms from those power sums (the
largest over pairs and mixes, chords, concave majorants, the mixture bound's
weighted sums) is non-decreasing in them and commutes with a common factor,
so the allowance is added once per bound, where a search's value is formed
(`log_sum_allowance` in `secure_sum.curve._finite_log_sums`, before the
smaller of two bounds is taken; `rdp_allowance` for the ±c sums of
`per_round`), and d coordinates add d of them. The blankets' weights β are
certified on the computed laws; the exact laws are at least e^(-gη) times
those, so a block of g others keeps β·e^(-gη) (`blanket_log_beta`); the
mixture bound then reads computed laws only through the target's rows (R is
used as computed), so it needs one law's allowance, the ±c mixes n.
"""

import math
from typing import Optional

import numpy as np

from tff_quant.common import exact_laws
from tff_quant.common import validation

U = exact_laws.U


def law_error(mech) -> float:
  """η of `mech`'s log-pmf (its `log_pmf_error`), 0 where none is stated.

  Args:
    mech: a `tff_quant.mechanisms.Mechanism`.

  Returns:
    The bound, >= 0 (0 for a mechanism that states none: its laws are then
    taken as exact, as before; docs/privacy.md lists which).
  """
  value: Optional[float] = getattr(mech, 'log_pmf_error', None)
  return 0.0 if value is None else float(value)


def rdp_allowance(mech, num_clients: int, alpha: float) -> float:
  """(2α-1)·nη/(α-1) for α > 1, 2nη at α = ∞: what a divergence of the
  n-client sum computed from `mech`'s laws may lie below the exact one.

  Args:
    mech: the mechanism whose laws were convolved.
    num_clients: n >= 1, the client laws in each sum.
    alpha: the order, > 1 or math.inf.

  Returns:
    The allowance, >= 0.

  Raises:
    ValueError: `num_clients` < 1 or `alpha` <= 1.
  """
  validation.check_integer('num_clients', num_clients, 1)
  if not (isinstance(alpha, (int, float)) and alpha > 1):
    raise ValueError(f'`alpha` must be in (1, inf], got {alpha!r}.')
  eta = law_error(mech)
  if eta == 0.0:
    return 0.0
  if math.isinf(alpha):
    return 2.0 * num_clients * eta
  return (2.0 * alpha - 1.0) * num_clients * eta / (alpha - 1.0)


def log_sum_allowance(mech, num_clients: int, orders) -> np.ndarray:
  """[orders] (2α-1)·nη: what log Σ P^α Q^(1-α) of an n-client sum built
  from `mech`'s laws may lie below the exact value (`rdp_allowance` times
  α-1), for a caller that takes the smaller of bounds built from different
  numbers of client laws (the mixture bound reads only the target's).

  Args:
    mech: the mechanism whose laws were convolved.
    num_clients: n >= 1, the client laws in each sum.
    orders: finite Rényi orders > 1.

  Returns:
    The allowances, float64.
  """
  validation.check_integer('num_clients', num_clients, 1)
  orders = np.asarray(orders, np.float64)
  return (2.0 * orders - 1.0) * num_clients * law_error(mech)


def blanket_log_beta(log_beta: float, block: int, mech) -> float:
  """log β of a blanket certified on the computed laws, made valid for the
  exact ones: log β - g·η for a block of g others.

  Args:
    log_beta: the certified log β (<= 0, -inf allowed).
    block: g >= 1, others per block.
    mech: the mechanism whose laws the blanket was built from.

  Returns:
    The lowered log β.
  """
  return log_beta - block * law_error(mech)
