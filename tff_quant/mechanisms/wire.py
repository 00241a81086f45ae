"""A bounded mechanism's level sum in a secure-sum field of 2^b elements (issue 64).

Under secure aggregation each client uploads every coordinate as an element
of the protocol's field Z_M: `wire_bits` b = log2 M bits per coordinate.
Without a wire budget the factory sums level indices in [0, L-1] exactly
(`SecureSumFactory`), a field of n(L-1)+1 elements: `unreduced_bits` =
⌈log2(n(L-1)+1)⌉ (15 bits at L = 256, n = 100). With one, each client sends
its levels mod M = 2^b (`reduce_levels`), the server receives S mod M
(`tff.aggregators.SecureModularSumFactory(M)`) and decodes the
representative of that residue in [c - M/2, c + M/2) (`centred_sum`), c the
level sum at zero signal (`sum_centre`: n·c₁, c₁ = -level_offset/level_step,
the index whose value is 0). The decode equals the unreduced one unless S
leaves that window (a wrap); then it is off by a multiple of M.

The wrap probability (`wrap_probability`) is a proved upper bound, the
Chernoff bound on the level sum's two tails with each client's exact
log-moment-generating function maximised over its inputs |x| <= a:

    P(S - c >= u) <= min over λ > 0 of exp(-λu + n·K⁺(λ)),
    K⁺(λ) = max over |x| <= a of log E[exp(λ(X - c₁)) | x],

and the same with -λ for the lower tail. Clients encode independently, so
the sum's moment generating function is the product of theirs, each at most
exp(K⁺(λ)) whatever its input. The max over x is exact where it is taken:
for a `piecewise_affine` mechanism the law, hence E[exp(λX)] (a positive
linear functional of it), is affine in x between consecutive critical
inputs, so its max over [-a, a] sits at ±a or a critical input inside;
for PBM (Binomial(L-1, p(x)), p increasing in x) E[exp(λX)] = (1 - p +
p·e^λ)^(L-1) is monotone in p, so its max is at x = a for λ > 0 and -a for
λ < 0. Other mechanisms (QMGeo as written, QG and RP without an input
lattice) are refused: no maximiser is proved. The bound holds for every λ,
so the numerical minimisation decides only its tightness; its rounding
errors are added (`_rounding_margin`).

TFF's DistributedDpSumFactory sizes its field by k ≈ 3.89 standard
deviations instead (`utility.modulus_needed`), a Gaussian approximation, not
a bound; `gaussian_rule_bits` gives it for comparison.

Privacy: the server's view S mod M is a function of S, which the accountant
bounds, so every divergence it reports still holds (post-processing).
"""

import dataclasses
import math
from typing import Optional

import numpy as np
from scipy import optimize
from scipy import special

from tff_quant.common import validation
from tff_quant.mechanisms import base
from tff_quant.mechanisms import pbm
from tff_quant.mechanisms import utility

tf = base.tf

#: The most wire bits: int32 values in [0, 2^31 - 1] (the factory's levels).
MAX_WIRE_BITS = 31
#: λ grid of the Chernoff bound: geometric, per level step (refined after).
_LAMBDAS = np.geomspace(1e-9, 1e3, 385)
_U = 2.0**-53    # unit roundoff of float64


class NoWrapBound(ValueError):
  """The mechanism has no proved bound on its wrap probability (refused)."""


def unreduced_bits(num_levels: int, num_clients: int) -> int:
  """⌈log2(n(L-1)+1)⌉: the bits of the field the exact level sum needs.

  The field of `aggregators.secure_sum_bits` without a modulus, in exact
  integer arithmetic (⌈log2(N + 1)⌉ is N's bit length).

  Args:
    num_levels: L >= 2.
    num_clients: n >= 1.

  Returns:
    The bits, at least 1.
  """
  n = validation.check_integer('num_clients', num_clients, 1)
  levels = validation.check_integer('num_levels', num_levels, 2)
  return max(1, (n * (levels - 1)).bit_length())


def check_wire_mechanism(mech: base.Mechanism) -> float:
  """c₁, the level index whose value is 0, for a mechanism a wire budget
  applies to (a half-integer: the registry's bounded mechanisms are
  symmetric, c₁ = (L-1)/2).

  Args:
    mech: the mechanism.

  Returns:
    c₁ = -level_offset/level_step, rounded to its half-integer.

  Raises:
    ValueError: a central mechanism, one already behind a modular sum
      (`modulus` set: ddgauss, skellam), or c₁ not within 1e-9 of a
      half-integer in [0, L-1].
  """
  if mech.central or mech.modulus is not None:
    raise ValueError(
        f'{mech!r} has no wire budget to set: '
        + ('it does not go through the secure sum (central).' if mech.central
           else f'it already sums modulo its own modulus {mech.modulus}.'))
  halves = -2.0 * mech.level_offset / mech.level_step
  rounded = round(halves)
  if abs(halves - rounded) > 1e-9 * max(1.0, abs(halves)) or not (
      0 <= rounded <= 2 * (mech.num_levels - 1)):
    raise ValueError(
        f'{mech!r}: the level of value 0 is index {halves / 2:.12g}, not a '
        'half-integer in [0, L-1]; a wire budget needs the zero-signal sum '
        'at a half-integer.')
  return rounded / 2.0


def window_start(centre_halves: int, modulus: int) -> int:
  """⌈c - M/2⌉ for c = centre_halves/2: the least integer of the decoding
  window [c - M/2, c + M/2), exact.

  Args:
    centre_halves: 2c, an integer.
    modulus: M >= 1.

  Returns:
    The window's first integer (its integers are start .. start + M - 1).
  """
  return -((modulus - centre_halves) // 2)


def _rounding_margin(biggest: float, lam: float, num_levels: int,
                     eta: float) -> float:
  """A bound on |computed - exact| of one client's log E[exp(λ(X - c₁))]
  at one input, over the rows of `log_pmfs`.

  Each term log p_k + λ(k - c₁) carries the pmf's error η plus at most
  3u·(|log p_k| + λ(L-1)) from the product and the sum; logsumexp adds at
  most (L + 4)u (its L exponentials and sum, relative, then one log) plus
  u·|result|. Doubled for safety. `biggest` is the largest finite
  |log p_k| of the rows.
  """
  return eta + 2 * _U * (3 * (biggest + lam * num_levels) + num_levels + 4 +
                         biggest + lam * num_levels)


class LevelSumTails:
  """Chernoff bounds on the two tails of the n-client level sum S around
  its zero-signal centre c = n·c₁, for inputs |x| <= a (module docstring).

  Args:
    mech: the mechanism (`check_wire_mechanism`).
    num_clients: n >= 1.
    signal_bound: a, the largest |x| (default `input_bound`: every input).

  Raises:
    ValueError: a mechanism `check_wire_mechanism` refuses, bad numbers.
    NoWrapBound: no proved maximiser of the moment generating function.
    utility.CostError: the pmfs at the vertices cost over
      `utility.MAX_OPERATIONS`.
  """

  def __init__(self, mech: base.Mechanism, num_clients: int,
               signal_bound: Optional[float] = None):
    self.mech = mech
    self.c1 = check_wire_mechanism(mech)
    self.n = validation.check_integer('num_clients', num_clients, 1)
    self.a = utility.resolve_signal_bound(mech, signal_bound)
    self.levels = mech.num_levels
    self.centre_halves = int(round(2 * self.c1)) * self.n
    self.top = self.n * (self.levels - 1)   # the largest S
    up, down = self._maximising_inputs()
    cost = (len(set(up) | set(down))) * mech.pmf_operations()
    if cost > utility.MAX_OPERATIONS:
      raise utility.CostError(
          f'The wrap bound of {mech!r} needs ~{cost:.2g} pmf operations '
          f'(limit {utility.MAX_OPERATIONS:.2g}): fewer levels.')
    cache = {}
    pmf = lambda x: cache.setdefault(x, np.asarray(mech.log_pmf(x), np.float64))
    self._up = np.stack([pmf(x) for x in up])
    self._down = np.stack([pmf(x) for x in down])
    self.eta = float(mech.log_pmf_error or 0.0)
    self._k = np.arange(self.levels, dtype=np.float64) - self.c1
    self._grid = {+1: self._log_mgf(+1, _LAMBDAS), -1: self._log_mgf(-1, _LAMBDAS)}

  def _maximising_inputs(self):
    """(inputs for λ > 0, inputs for λ < 0) among which the max of
    E[exp(λX) | x] over |x| <= a lies (module docstring)."""
    a = self.a
    if isinstance(self.mech, pbm.PBM):
      return [a], [-a]
    if not self.mech.piecewise_affine:
      raise NoWrapBound(
          f'{self.mech!r} has no proved wrap bound: its law is not affine '
          'between critical inputs (`piecewise_affine`), so the max of its '
          'moment generating function over inputs is not located. Use an '
          'input lattice (lattice >= 2) or full_support=True, or no wire '
          'budget.')
    crit = np.asarray(self.mech.critical_inputs(), np.float64)
    pts = sorted(set([-a, a] + [float(x) for x in crit[np.abs(crit) < a]]))
    return pts, pts

  def _log_mgf(self, sign: int, lams: np.ndarray) -> np.ndarray:
    """[len(lams)] K(sign·λ) = max over the inputs of log E[e^{sign·λ(X-c₁)}],
    each raised by its rounding margin."""
    rows = self._up if sign > 0 else self._down
    finite = rows[np.isfinite(rows)]
    biggest = float(np.max(np.abs(finite))) if finite.size else 0.0
    out = np.empty(len(lams))
    for i, lam in enumerate(lams):
      vals = special.logsumexp(rows + sign * lam * self._k[None, :], axis=1)
      out[i] = float(np.max(vals)) + _rounding_margin(biggest, lam,
                                                      self.levels, self.eta)
    return out

  def log_tail(self, sign: int, u: float) -> float:
    """A proved upper bound on log P(sign·(S - c) >= u).

    Args:
      sign: +1 (upper tail) or -1 (lower tail).
      u: the threshold, in level units.

    Returns:
      The bound: 0 for u <= 0, -inf past the sum's range, else the Chernoff
      bound at the best λ found (grid, then bounded refinement), rounding
      margins included.
    """
    c = self.centre_halves / 2.0
    reach = self.top - c if sign > 0 else c   # the largest sign·(S - c)
    if u <= 0:
      return 0.0
    if u > reach:
      return -math.inf
    bound = lambda lam, k: (-lam * u + self.n * k +
                            4 * _U * (lam * u + self.n * abs(k)))
    values = np.array([bound(l, k) for l, k in zip(_LAMBDAS, self._grid[sign])])
    i = int(np.argmin(values))
    best = float(values[i])
    lo, hi = _LAMBDAS[max(i - 1, 0)], _LAMBDAS[min(i + 1, len(_LAMBDAS) - 1)]
    if hi > lo:
      f = lambda lam: bound(lam, float(self._log_mgf(sign, [lam])[0]))
      res = optimize.minimize_scalar(f, bounds=(lo, hi), method='bounded',
                                     options={'xatol': lo * 1e-3})
      best = min(best, float(f(float(res.x))))
    return min(best, 0.0)

  def wrap_tails(self, modulus: int):
    """(log-bounds on P(W >= j), on P(W <= -j)) for j = 1, 2, ... while
    nonzero: W the multiples of M the decode is off by (S = r + W·M, r the
    window's representative).

    Args:
      modulus: M.

    Returns:
      Two lists of log-bounds (empty: that side never wraps).
    """
    c = self.centre_halves / 2.0
    start = window_start(self.centre_halves, modulus)
    ups, downs = [], []
    j = 1
    while start + j * modulus <= self.top:       # W >= j: S >= start + jM
      ups.append(self.log_tail(+1, start + j * modulus - c))
      j += 1
    j = 1
    while start - 1 - (j - 1) * modulus >= 0:    # W <= -j
      downs.append(self.log_tail(-1, c - (start - 1 - (j - 1) * modulus)))
      j += 1
    return ups, downs

  def wrap_probability(self, modulus: int) -> float:
    """A proved upper bound on P(W != 0) (at most 1; 0 when the window
    holds [0, n(L-1)])."""
    ups, downs = self.wrap_tails(modulus)
    p = sum(math.exp(t) for t in ups[:1] + downs[:1])
    return min(1.0, p * (1 + 8 * _U))

  def wrap_second_moment(self, modulus: int) -> float:
    """A proved upper bound on E[W²] = Σ_j (2j - 1)(P(W >= j) + P(W <= -j))."""
    ups, downs = self.wrap_tails(modulus)
    total = 0.0
    for tails in (ups, downs):
      for j, t in enumerate(tails, start=1):
        total += (2 * j - 1) * math.exp(t)
    return total * (1 + 8 * _U * (len(ups) + len(downs) + 2))


def wrap_probability(mech: base.Mechanism, num_clients: int, wire_bits: int,
                     signal_bound: Optional[float] = None) -> float:
  """A proved upper bound on the probability that one coordinate's decoded
  level sum differs from the exact one (a wrap), for any inputs |x| <= a.

  The Chernoff bound of the module docstring on both tails of the n-client
  level sum S around c = n·c₁, at the window [c - M/2, c + M/2), M = 2^b.
  Where the mean level at x = 0 is c₁ (the registry's mechanisms: their
  laws at 0 are symmetric) K±(λ) >= 0 by Jensen, so the bound is
  nondecreasing in n and the one at the most clients covers every smaller
  cohort (tests/mechanisms/wire_test.py checks it).

  Args:
    mech: a bounded registry mechanism (not modular, not central).
    num_clients: n >= 1, the most clients in a round.
    wire_bits: b in [1, MAX_WIRE_BITS].
    signal_bound: a > 0 (default the input bound: every input).

  Returns:
    The bound, in [0, 1]; 0 when 2^b holds every sum (b >= unreduced_bits).

  Raises:
    ValueError: bad numbers (named, with the range), a mechanism a wire
      budget does not apply to.
    NoWrapBound, utility.CostError: as `LevelSumTails`.
  """
  b = validation.check_integer('wire_bits', wire_bits, 1, MAX_WIRE_BITS)
  return LevelSumTails(mech, num_clients, signal_bound).wrap_probability(2**b)


def _fewest_bits(tails: LevelSumTails, modclip_prob: float) -> int:
  """The fewest b whose wrap bound is <= modclip_prob (the bound falls with
  b: the windows are nested), at most the unreduced bits (never wraps)."""
  hi = unreduced_bits(tails.levels, tails.n)
  lo = 1
  while lo < hi:
    mid = (lo + hi) // 2
    if tails.wrap_probability(2**mid) <= modclip_prob:
      hi = mid
    else:
      lo = mid + 1
  return lo


def wire_bits_needed(mech: base.Mechanism, num_clients: int,
                     signal_bound: Optional[float] = None,
                     modclip_prob: float = utility.MODCLIP_PROB) -> int:
  """The fewest wire bits b whose proved wrap probability is at most
  `modclip_prob` (`wrap_probability`), and never more than
  `unreduced_bits` (that field holds every sum: no wrap).

  Args:
    mech: a bounded registry mechanism.
    num_clients: n >= 1, the most clients in a round.
    signal_bound: a (default the input bound).
    modclip_prob: the wrap probability allowed per coordinate and round, in
      (0, 1) (default TFF's `utility.MODCLIP_PROB`, 1e-4).

  Returns:
    b.

  Raises:
    ValueError, NoWrapBound, utility.CostError: as `wrap_probability`.
  """
  validation.check_probability('modclip_prob', modclip_prob)
  return _fewest_bits(LevelSumTails(mech, num_clients, signal_bound),
                      modclip_prob)


def check_wire_bits(mech: base.Mechanism, num_clients: int, wire_bits: int,
                    signal_bound: Optional[float] = None,
                    modclip_prob: float = utility.MODCLIP_PROB) -> int:
  """`wire_bits`, validated: refused when the field cannot hold the sum.

  Args:
    mech, num_clients, signal_bound, modclip_prob: as `wire_bits_needed`.
    wire_bits: b.

  Returns:
    b.

  Raises:
    ValueError: b outside [1, MAX_WIRE_BITS], or its wrap bound above
      `modclip_prob`; the message names the bits needed and the range.
  """
  b = validation.check_integer('wire_bits', wire_bits, 1, MAX_WIRE_BITS)
  validation.check_probability('modclip_prob', modclip_prob)
  tails = LevelSumTails(mech, num_clients, signal_bound)
  p = tails.wrap_probability(2**b)
  if p > modclip_prob:
    need = _fewest_bits(tails, modclip_prob)
    raise ValueError(
        f'`wire_bits`={b} cannot hold the level sum of {tails.n} clients of '
        f'{mech!r} (|x| <= {tails.a:.6g}): it wraps with probability up to '
        f'{p:.3g} per coordinate, above modclip_prob={modclip_prob:g}. It '
        f'needs {need} bits: allowed {need} <= wire_bits <= {MAX_WIRE_BITS} '
        f'({unreduced_bits(tails.levels, tails.n)} never wraps).')
  return b


@dataclasses.dataclass(frozen=True)
class WireUtility:
  """The debiased error of the decoded mean with the wraps counted.

  Attributes:
    error: the bound (√E_a + γ·M·√E[W²]/(n·s))², `debiased_error_with_wraps`.
    error_without_wraps: E_a (`utility.SignalUtility.error`).
    slope: s, the least slope of the decoded mean over the range.
    wrap_probability: the proved bound on P(W != 0).
    wrap_rms: √ of the proved bound on E[W²].
    wire_bits: b.
    num_clients: n.
  """
  error: float
  error_without_wraps: float
  slope: float
  wrap_probability: float
  wrap_rms: float
  wire_bits: int
  num_clients: int


def debiased_error_with_wraps(mech: base.Mechanism, num_clients: int,
                              wire_bits: int,
                              signal_bound: Optional[float] = None,
                              signal_utility=None) -> WireUtility:
  """The debiased error (docs/utility.md) of the decoded mean when the sum
  travels in a field of 2^b, wraps included.

  A wrap by W multiples of M moves the decoded sum by W·M levels, the mean
  by γW·M/n (γ = level_step; `Mechanism.decode` is affine). The debiased
  estimate's error is (D₀ - m(x))/s + γ·W·M/(n·s); by Minkowski its rms is
  at most √(v/s²) + γ·M·√E[W²]/(n·s), so at the worst input

      error <= (√E_a + γ·M·√E[W²]/(n·s_min))²,

  with E[W²] bounded by the Chernoff tails (`LevelSumTails`). Equal to E_a
  when b holds every sum.

  Args:
    mech: a bounded registry mechanism.
    num_clients: n.
    wire_bits: b.
    signal_bound: a, the range of the wrap bound (default the input bound).
    signal_utility: the mechanism's `utility.SignalUtility` at n clients,
      already computed (calibration's), at a range within a; default
      `mech.signal_utility(n, a)`.

  Returns:
    A `WireUtility`.

  Raises:
    ValueError: as `wrap_probability`, or a `signal_utility` for other
      clients or a wider range than a.
  """
  b = validation.check_integer('wire_bits', wire_bits, 1, MAX_WIRE_BITS)
  tails = LevelSumTails(mech, num_clients, signal_bound)
  util = signal_utility
  if util is None:
    util = mech.signal_utility(tails.n, tails.a)
  elif util.num_clients != tails.n or util.signal_bound > tails.a * (1 + 1e-12):
    raise ValueError(
        f'`signal_utility` is for n = {util.num_clients}, |x| <= '
        f'{util.signal_bound:.6g}; needed n = {tails.n} and a range within '
        f'|x| <= {tails.a:.6g}.')
  m = 2**b
  second = tails.wrap_second_moment(m)
  if second == 0:
    error = util.error
  elif util.slope > 0:
    shift = mech.level_step * m * math.sqrt(second) / (tails.n * util.slope)
    error = (math.sqrt(util.error) + shift)**2
  else:
    error = math.inf
  return WireUtility(error, util.error, util.slope,
                     tails.wrap_probability(m), math.sqrt(second), b, tails.n)


def gaussian_rule_bits(mech: base.Mechanism, num_clients: int,
                       signal_bound: Optional[float] = None,
                       modclip_prob: float = utility.MODCLIP_PROB) -> int:
  """The bits TFF's DistributedDpSumFactory rule would give this level sum
  (`utility.modulus_needed`: k standard deviations, a Gaussian
  approximation, NOT a bound), for comparison with `wire_bits_needed`.

  Args:
    mech, num_clients, signal_bound, modclip_prob: as `wire_bits_needed`.

  Returns:
    ⌈log2 modulus_needed(σ, n, s)⌉ with σ² the worst per-client level
    variance and s the largest mean shift |E[X | x] - c₁| at |x| = a, in
    level steps.
  """
  check_wire_mechanism(mech)
  a = utility.resolve_signal_bound(mech, signal_bound)
  step = mech.level_step
  sigma = math.sqrt(mech.worst_case_variance()) / step
  # E[X | x] - c₁ = E[value | x]/γ (value = offset + γX, c₁ = -offset/γ).
  shift = max(abs(utility.per_client_moments(mech, 1, x)[0]) / step
              for x in (-a, a))
  need = utility.modulus_needed(sigma, num_clients, shift, modclip_prob)
  return max(1, math.ceil(math.log2(need)))


# ----------------------------------------------------------------------------
# TensorFlow: what the factory's client and server computations call.
# ----------------------------------------------------------------------------
def reduce_levels(levels, modulus: int):
  """Client side: levels mod M (int32), what the client uploads.

  Args:
    levels: integer tensor (one client's levels, or K packed clients' sum).
    modulus: M = 2^wire_bits.

  Returns:
    int32 tensor of levels' shape, in [0, M - 1].
  """
  levels = tf.cast(levels, tf.int64)
  return tf.cast(tf.math.floormod(levels, modulus), tf.int32)


def sum_centre(mech: base.Mechanism, num_clients):
  """c = n·c₁ (float64 tensor): the level sum at zero signal, known to the
  server from the round's (public) client count.

  Args:
    mech: the mechanism (`check_wire_mechanism`).
    num_clients: n, an integer tensor.

  Returns:
    float64 tensor, a half-integer (exact below 2^52).
  """
  c1 = check_wire_mechanism(mech)
  return tf.cast(num_clients, tf.float64) * c1


def centred_sum(sum_mod_m, centre, modulus: int):
  """Server side: the representative of each residue in [c - M/2, c + M/2).

  Equals the exact sum whenever the exact sum lies in that window
  (`wrap_probability` bounds how often it does not).

  Args:
    sum_mod_m: integer tensor, the secure sum mod M (any representative).
    centre: c, a float tensor or number (a half-integer, exact in float64).
    modulus: M.

  Returns:
    int64 tensor: start + ((s - start) mod M), start = ⌈c - M/2⌉.
  """
  start = tf.cast(tf.math.ceil(tf.cast(centre, tf.float64) - modulus / 2.0),
                  tf.int64)
  s = tf.cast(sum_mod_m, tf.int64)
  return start + tf.math.floormod(s - start, modulus)


def decode_wire_sum(mech: base.Mechanism, sum_mod_m, num_clients,
                    modulus: int):
  """`mech.decode` of the centred sum: the estimate of the sum of inputs.

  Args:
    mech: the mechanism.
    sum_mod_m: the secure sum mod M.
    num_clients: n (integer tensor).
    modulus: M.

  Returns:
    float32 tensor, as `Mechanism.decode`.
  """
  return mech.decode(centred_sum(sum_mod_m, sum_centre(mech, num_clients),
                                 modulus), num_clients)
