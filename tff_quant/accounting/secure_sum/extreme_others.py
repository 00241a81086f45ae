"""The others at ±c in every mix (others='extremes'), and where that is proved.

Every mix of the n-1 others at ±c, the same family as
`divergence.renyi_divergence_of_sum`: an assumption. Mixes are bounded in
groups (`others.split_groups`): for k in [k0, k1] others at +c, the others'
law is T * S_k with T = k0 at +c and n-1-k1 at -c, so by data processing
D(P*T || Q*T) bounds every k of the group. An exhaustive search over every
multiset of critical inputs for the others and every target pair (tested for
n <= 3) finds no worse case for RQM, PBM and QMGeo at finite orders; no
proof exists.

Where the law is affine in the input on the whole range (one PBM trial: the
ends are its only vertices) the ±c mixes are the sup over any inputs of the
others (`blankets.two_vertices`), so they bound the sum for any others too
(`ends_are_vertices`).

Numerics (docs/privacy.md, "Numerics"): where `proved_mixes_apply`, the
others' law of each group is built by `matrix_sums` (or in closed form for
a two-entry law, `_TwoPointPowers`); above that cost, by the tilted FFT
(`convolution.with_sum(..., with_error=True)`). Either way its proved error
is carried into the power sums.
"""

from concurrent import futures
import math

import numpy as np

from tff_quant.accounting import blankets as blankets_lib
from tff_quant.accounting import divergence
from tff_quant.accounting import matrix_sums
from tff_quant.accounting import others as others_lib
from tff_quant.accounting.secure_sum import convolution
from tff_quant.accounting.secure_sum import limits as limits_lib
from tff_quant.accounting.secure_sum import targets as targets_lib
from tff_quant.common import exact_laws

EXACT_SPLITS = others_lib.EXACT_SPLITS
split_groups = others_lib.split_groups
# Up to this many others, where the ±c mixes are the sup over any inputs of
# the others (`ends_are_vertices`), every mix is evaluated alone
# (`vertex_splits`): a group's bound drops k1 - k0 others, about (k1 -
# k0)/(n - 1) of D too much where the mixes are near equal (QMGeo, 16
# levels on ±16c, p = 0.46, n = 100, at t = 2/√8192: 7.5% with EXACT_SPLITS,
# 2.0106e-4 against 2.1619e-4).
EVERY_MIX = 128


def vertex_splits(num_clients: int, exact: int) -> int:
  """The single groups `extreme_mixes` takes where the ends are the vertices.

  Args:
    num_clients: n, clients in the secure sum.
    exact: the single groups asked for (`others.split_groups`).

  Returns:
    n (every mix alone) where n - 1 <= EVERY_MIX, else `exact`.
  """
  return max(exact, num_clients) if num_clients - 1 <= EVERY_MIX else exact


def ends_are_vertices(mech, targets: targets_lib.TargetPairs) -> bool:
  """Whether the ±c mixes are the sup over any inputs of the others.

  Args:
    mech: a `tff_quant.mechanisms.Mechanism`.
    targets: its `TargetPairs`.

  Returns:
    True for vertex targets whose critical inputs are just ±c (one PBM
    trial): the law is affine in the input on the whole range
    (`blankets.two_vertices`).
  """
  return targets.method == 'vertices' and blankets_lib.two_vertices(
      targets_lib.mirrored_critical_inputs(mech), mech.input_bound)


def proved_mixes_apply(mech, num_clients: int,
                       limits: limits_lib.Limits = limits_lib.DEFAULT_LIMITS
                       ) -> bool:
  """Whether `extreme_mixes` builds the others' laws by `matrix_sums`
  rather than the tilted FFT (both with their proved error carried; the
  matrix products are tighter, the FFT cheaper at many levels and clients).

  Up to `limits.matrix_levels` levels and L²(n-1)² multiply-adds (each end's
  copies added one at a time, `matrix_sums.Powers`) within
  `limits.proved_mixes`; always for a two-entry law (closed form).

  Args:
    mech: a `tff_quant.mechanisms.Mechanism`.
    num_clients: n, clients in the secure sum.
    limits: the `Limits`.

  Returns:
    True where the proved construction serves.
  """
  levels = mech.num_levels
  return levels == 2 or (
      levels <= limits.matrix_levels and
      float(levels)**2 * float(num_clients - 1)**2 <= limits.proved_mixes)


# ln 2 as a sum of two floats (fdlibm's split; b + LN2_HI is exact for b in
# [-2·LN2_HI, -LN2_HI/2] by Sterbenz's lemma, though its rounding is carried
# regardless): |LN2_HI + LN2_LO - ln 2| < 1.17e-26, checked to 60 digits
# (tests/accounting/secure_sum/extreme_others_test.py).
LN2_HI = float.fromhex('0x1.62e42fee00000p-1')
LN2_LO = float.fromhex('0x1.a39ef35793c76p-33')
LN2_SPLIT_ERROR = 1.2e-26


class _TwoPointPowers:
  """`matrix_sums.Powers`' interface for a two-entry law [l0, l1] (one PBM
  trial): its m-fold convolution in closed form.

  With b = max(l0, l1), g = min - max <= 0 and c_j the count of the smaller
  entry's draws (j if it is l1, else m - j), entry j of the m-fold law is

    log C(m, j) + (m - j)·l0 + j·l1 = B_j + c_j·g + m·(b + ln 2),

  B_j = log C(m, j) - m·ln 2 = log Binomial(m, 1/2)(j) by
  `exact_laws.log_binomial` with its proved per-entry bound. No share p is
  formed and no log(e^l0 + e^l1) is taken: the only inexact inputs are
  g (u·|g|, carried c_j times), the shift m·((b + LN2_HI) + LN2_LO) (two
  adds, u each of its size, LN2_SPLIT_ERROR per copy, the product u·|shift|)
  and the three adds building the entry (u·|each partial sum|). The shift
  is the same for every entry, so it could be carried once into log E as a
  common factor; computed this way it is within ~u·|shift| already, so it
  is carried per entry like the rest. The per-entry bounds are returned as
  `matrix_sums.EntryError.fit` (const + slope·|value|, least in the bulk).
  Nothing is cut (log_dropped is -inf)."""

  def __init__(self, log_r: np.ndarray):
    self.l0, self.l1 = (float(v) for v in np.asarray(log_r, np.float64))
    self._memo = {}

  def log_dropped(self, m: int) -> float:
    del m
    return -np.inf

  def __call__(self, m: int):
    if m in self._memo:
      return self._memo[m]
    u = exact_laws.U
    if m == 0:
      out = (np.zeros(1), 0.0)
    elif not (math.isfinite(self.l0) and math.isfinite(self.l1)):
      # A point mass: m·l at j = 0 (l1 impossible) or j = m (l0 impossible).
      law = np.full(m + 1, -np.inf)
      at, value = (0, self.l0) if math.isfinite(self.l0) else (m, self.l1)
      law[at] = m * value
      out = (law, u * abs(m * value) * (1 + 1e-6))
    else:
      big, small = max(self.l0, self.l1), min(self.l0, self.l1)
      gap = small - big                                   # <= 0
      j = np.arange(m + 1, dtype=np.float64)
      counts = j if self.l1 <= self.l0 else m - j         # exact
      near = big + LN2_HI
      shift = m * (near + LN2_LO)
      shift_err = (m * (LN2_SPLIT_ERROR + u * abs(near) +
                        u * abs(near + LN2_LO)) + u * abs(shift))
      log_c, err_c = exact_laws.log_binomial(m, 0.5)
      steps = counts * gap
      inner = log_c + steps
      law = inner + shift
      err = (err_c + shift_err + counts * u * abs(gap) +
             u * (np.abs(steps) + np.abs(inner) + np.abs(law))) * (1 + 4 * u)
      out = (law, matrix_sums.EntryError.fit(err, law))
    self._memo[m] = out
    return out


def _powers(log_r: np.ndarray, tail: float):
  """The copies' laws of one end: in closed form for a two-entry law
  (`_TwoPointPowers`), else by `matrix_sums.Powers`."""
  if np.asarray(log_r).size == 2:
    return _TwoPointPowers(log_r)
  return matrix_sums.Powers(log_r, tail)


def _proved_sum(rows: np.ndarray, powers, counts):
  """(rows convolved with the others' law, a bound on its log error, log
  of a bound on the mass the cuts left out).

  The others' law is A' * B', A' and B' the cut powers of the ±c laws
  (`matrix_sums.Powers`); with A = A' + a and B = B' + b the uncut ones
  (masses <= 1 each up to their proved error), A*B - A'*B' = a*B + A'*b has
  mass at most |a| + |b| (each side's mass <= e^err, 1e-9 margin in log)."""
  (law_a, err_a), (law_b, err_b) = powers[0](counts[0]), powers[1](counts[1])
  law, err = matrix_sums.convolve(law_a[None], err_a, law_b, err_b)
  lost = float(np.logaddexp(powers[0].log_dropped(counts[0]) + err_b,
                            powers[1].log_dropped(counts[1]) + err_a)) + 1e-9
  conv, err = matrix_sums.convolve(rows, 0.0, law[0], err)
  return conv, err, lost


def extreme_mixes(mech, targets: targets_lib.TargetPairs, num_clients: int,
                  orders: np.ndarray, exact: int, tail: float = math.inf,
                  limits: limits_lib.Limits = limits_lib.DEFAULT_LIMITS
                  ) -> np.ndarray:
  """The largest log Σ P^α Q^(1-α) over the others at ±c, every mix k of n-1 at +c.

  A group [k0, k1] of mixes is bounded by its common part (k0 at +c, n-1-k1
  at -c): data processing (module docstring). Each group's law is cut `tail`
  below its top (`convolution.cut_tail`, `convolution.add_lost`); groups are
  evaluated in threads (the FFTs and numpy's loops release the GIL).

  Args:
    mech: a `tff_quant.mechanisms.Mechanism`.
    targets: its `TargetPairs`.
    num_clients: n, clients in the secure sum.
    orders: [orders] finite Rényi orders > 1.
    exact: single groups next to each anchor (`others.split_groups`).
    tail: how far below its top each group's law may be cut.
    limits: the `Limits` (`convolution.with_sum`).

  Returns:
    [orders, pairs] the log power sums, at least 0.
  """
  worst = np.full((orders.size, len(targets.pairs)), 0.0)
  first = (num_clients - 1) // 2 if targets.symmetric else 0
  at_plus, at_minus = divergence.end_log_pmfs(mech)
  log_e0 = convolution.pair_log_sums(targets, targets.basis, orders, 0.0)
  proved = proved_mixes_apply(mech, num_clients, limits)
  if proved:
    # The others' laws by matrix products with proved rounding bounds
    # (`matrix_sums`), carried into the power sums; else by the tilted FFT
    # with its proved per-entry error, carried the same way.
    powers = (_powers(at_plus, tail), _powers(at_minus, tail))

  def group(bounds):
    k0, k1 = bounds
    if proved:
      conv, err, lost = _proved_sum(targets.basis, powers,
                                    (k0, num_clients - 1 - k1))
      return convolution.add_lost(
          convolution.pair_log_sums(targets, conv, orders, err), lost, log_e0)
    conv, err, lost = convolution.with_sum(
        targets.basis, [(at_plus, k0), (at_minus, num_clients - 1 - k1)],
        tail, limits, with_error=True)
    return convolution.add_lost(
        convolution.pair_log_sums(targets, conv, orders, err), lost, log_e0)

  groups = split_groups(first, num_clients - 1, (num_clients - 1) // 2, exact)
  with futures.ThreadPoolExecutor(others_lib.workers(len(groups))) as pool:
    for value in pool.map(group, groups):
      worst = np.maximum(worst, value)
  return worst
