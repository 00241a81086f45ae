"""Per-coordinate Gaussian domination with a linear rate: a round's profile
without Rényi divergences (docs/privacy.md, "Gaussian domination").

For one coordinate's secure sum, write (P, Q) for its laws with the target
at x and at x' = x − Δ, the others' inputs fixed, and T(P, Q) for the
tradeoff function (Dong, Roth, Su 2022, Def. 2.1). If, for every target
position, every input of the others and every shift Δ in (0, 2c],

    T(P, Q) >= G_{κΔ},   G_μ(α) = Φ(Φ⁻¹(1 − α) − μ),

then, the d coordinates being independent given the inputs, the round is
dominated by (N(0, 1), N(κ‖Δ‖₂, 1)) (DRS22 Thm 3.2 and Cor. 3.3: a tensor
product of G_{μ_j} is G_{‖μ‖₂}; Zhu, Dong, Wang 2022, Def. 7 and Thm 10), so
its privacy profile is at most the Gaussian's at μ = κ·(the ℓ2 bound of Δ):
2·l2_clip on the ℓ2 route, 2c√d when every coordinate may move end to end.
G_μ is symmetric, so one order of each pair suffices (T(Q, P) = T(P, Q)⁻¹).
`profile_route` then samples and composes that profile.

For a finite pair, T >= G_μ exactly when μ >= max_k Φ⁻¹(Q(E_k)) − Φ⁻¹(P(E_k))
over the Neyman–Pearson prefixes E_k (outcomes in decreasing Q/P): T is
linear between its kinks and G_μ convex (`tradeoff_mu`).

PBM (`pbm_trial_rate`): the m-level PBM's sum is a function of its m − 1
one-trial sums, independent given the inputs (the sum reduction of
`PBM._sum_reduction`), so its rate is √(m − 1) times the one-trial rate κ₁.
For one trial per client at n clients, a = p(+c), b = p(−c):

* the others' trials are mixtures of Bern(a) and Bern(b) with weights fixed
  by their inputs, and the target's pair is a mixture of the "top" pair
  (Bern(a), (1 − η)Bern(a) + ηBern(b)) and the "bottom" pair
  ((1 − η)Bern(b) + ηBern(a), Bern(b)), η = Δ/(2c), with the same mixing
  weights on both sides; the hockey-stick divergence is jointly convex, so
  the worst case is one of 2n pairs: K of the others at a, n − 1 − K at b,
  the target top or bottom (the bottom one mirrored, s -> n − s, is a top
  one with a, b replaced by 1 − b, 1 − a);
* a top pair is P_η = P + η·(R₁ − P) with P = Bern(a) * O, R₁ = Bern(b) * O,
  O the others' law (log-concave: a convolution of binomials), so Q/P
  decreases in the outcome for every η and the prefixes are E_k = {0..k}:
  P(E_k) = F(k−1) + (1−a)·O(k), the shift's D_k = (a − b)·O(k) (F the CDF
  of O), so μ*(η) = max_k Φ⁻¹(P_k + η·D_k) − Φ⁻¹(P_k);
* (Φ⁻¹)' decreases on (0, ½] and increases on [½, 1), so each secant slope
  of Φ⁻¹ from P_k has no interior maximum in η, and
  sup_{0 < η <= 1} μ*(η)/η = max_k max(D_k/φ(Φ⁻¹(P_k)), Φ⁻¹(P_k + D_k) −
  Φ⁻¹(P_k)): the limit η -> 0 and η = 1 (Δ = 2c), a finite computation.

Binary reductions (`_trials`): the rate covers every mechanism whose
n-client sum is a function of `trials` independent one-trial sums in which a
client's trial succeeds with a probability p(x) affine in its input, plus
randomness that does not depend on any input:

* PBM: m − 1 trials at p(x) = ½ + θx/c;
* a law affine in the input over one bin [u, v] ⊇ [−c, c]: p_x = (1 − λ)·p_u
  + λ·p_v, λ = (x − u)/(v − u). Clients are independent, so each may be
  drawn as "go up with probability λ(x), then draw from p_v, else from p_u"
  without changing the sum's law, and given the count K that went up the
  sum is K draws from p_v and n − K from p_u, none of which any input
  moves: a randomized function of K, the one-trial PBM sum at λ (data
  processing). RQM's law is affine over each bin between consecutive levels
  (its kept levels do not depend on x within a bin), and with R even the
  central bin [−h/2, h/2] holds [−c, c] when h > 2c: θ = c/h (at two levels
  h = 2X, so θ = c/(2X)). QMGeo's is affine over its bins too (a walk from
  r or r + 1 after one trial at p(x) = (x + W)/h − r, r = R/2 − 1). The
  noise of the gaps or walks is not counted.

Two levels, Lipschitz (`_lipschitz_binary`): the family argument needs of
a client's trial only that its probability lies in [b, a] (then it is a
mixture of Bern(a) and Bern(b)) and that two inputs' probabilities are at
most η·(a − b) apart; affinity is not used. A mechanism with two output
levels is one trial per client. If its up-probability p0 is odd about ½
(p0(0) = ½) with |p0'| <= β on the line, then |p0(x) − ½| <= β·|x| and
|p0(x) − p0(x')| <= β·|x − x'|, so the family at θ' = βc holds every input
and η <= Δ/(2c): PBM's one-trial rate at θ' applies. With the input
lattice the law is p0's chord between float lattice points, whose slopes
are <= β too, at a position x̂ within LATTICE_ULPS·2⁻⁵³·c of x, which enters
as e = β·(that). The two-level quantized Gaussian has p0(x) = E[(clip(x +
σZ, ±Cq) + Cq)/(2Cq)], p0' = P(|x + σZ| < Cq)/(2Cq), largest at 0: β = (1 −
2Φ(−Cq/σ))/(2Cq). The one-bit randomized projection keeps the sign of
x + σZ with probability q: p0 = (1 − q) + (2q − 1)Φ(x/σ), β = |2q − 1|φ(0)/σ.
Their samplers' own roundings (the normal draw, the clip, the last
rounding) are the inverse-CDF class docs/privacy.md does not claim.

The float p each sampler computes is within e = SNAP_ULPS·2⁻⁵³·max(E, 1)
of the affine value (E the computed point's extent: 1 for PBM's p, R − 1
for RQM's and QMGeo's t; the same few roundings `base.snap_to_integers`
bounds). The rounding of RQM's p_up = (t − L)/(U − L) given its kept levels
is an inverse-CDF step of the kind docs/privacy.md ("What the samplers
draw") does not claim, as for every sampler. The family is taken at half-width θ' >= |α − ½| + β·c + e (α + βx
the affine p, computed exactly from the float parameters) raised past the
family's own roundings, so every computed p lies in it; two inputs Δ apart
give laws η <= Δ/(2c) + e/(βc) apart, so κ = √trials·κ₁(θ') and each
coordinate's μ gains s = κ·2e/β (`Rate.slack`).

Every term is bounded above with its rounding carried: the binomials'
proved log error (`exact_laws.log_binomial`), the convolution's and
prefix sums' relative error (non-negative terms), Φ⁻¹ certified through
the ndtr assumption (`exact_laws.ndtr_relative_error`), and the prefixes
whose mass is below TAIL (2^-900, where float64 would lose it) bounded
together in closed form through the monotone p/φ(Φ⁻¹(p)).
"""

import dataclasses
import fractions
import functools
import math
from typing import Optional

import numpy as np
from scipy import special

from tff_quant.common import exact_laws
from tff_quant.common import validation
from tff_quant.mechanisms import base
from tff_quant.mechanisms import pbm
from tff_quant.mechanisms import qmgeo
from tff_quant.mechanisms import quantized_gaussian
from tff_quant.mechanisms import randomized_projection
from tff_quant.mechanisms import rqm

_U = exact_laws.U
_LIB = 2 * exact_laws.ELEMENTARY_ULPS * exact_laws.U   # one elementary function
_SUB = 2.0**-1074   # float64's smallest subnormal: an underflow's absolute error
_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)
#: Prefix masses below TAIL are bounded together in closed form (module
#: docstring); above it every value is a normal float with a relative error.
TAIL = 2.0**-900
#: The most clients `rate` serves: above about 35² = 1,225 the prefixes below
#: TAIL, bounded together, exceed the bulk's rate (κ₁ 1.69x the Fisher value
#: at n = 3,400, 20 s), so the RDP curve's profile serves there instead.
MAX_CLIENTS = 1200
#: Entries (clients × outcomes) handled per block of the others' mixes.
_BLOCK = 1 << 21


@dataclasses.dataclass(frozen=True)
class Rate:
  """A proved per-coordinate Gaussian-domination rate.

  Attributes:
    rate: κ: every coordinate's pair at shift Δ has T >= G_{κΔ + s}.
    why: the argument, for the guarantee's text.
    slack: s, each coordinate's μ beyond κΔ: the law's parameter is
      computed in float64 from the input, so two inputs Δ apart may give
      laws a few ulps further apart than Δ says. Over d coordinates the
      round's μ is at most κ·‖Δ‖₂ + s·√d (Minkowski).
    tail: t, added to the round's Gaussian profile at every ε (0 here;
      `blanket_domination.MixtureRate`'s concentration step).
  """
  rate: float
  why: str
  slack: float = 0.0
  tail: float = 0.0

  def round_mu(self, sensitivity: float, dim: int) -> float:
    """μ of the Gaussian pair dominating a round whose change has ℓ2
    norm <= `sensitivity` over `dim` coordinates: κ·S + s·√d, rounded up.

    Args:
      sensitivity: S > 0.
      dim: d >= 1.

    Returns:
      μ > 0.
    """
    return (self.rate * sensitivity + self.slack * math.sqrt(dim)) * (1 + 4 * _U)


def tradeoff_mu(p, q) -> float:
  """μ* = inf{μ : T(P, Q) >= G_μ} of a finite pair, by the kink formula
  (module docstring), in float64 without carried rounding: for tests and
  diagnostics (the accountant uses `pbm_trial_rate`).

  Args:
    p, q: probability vectors on the same outcomes.

  Returns:
    μ* >= 0; inf when some outcome has mass under one law only (T then
    misses G_μ at an end for every finite μ).

  Raises:
    ValueError: shapes differ, or a mass is negative or not finite.
  """
  p = np.asarray(p, np.float64).ravel()
  q = np.asarray(q, np.float64).ravel()
  if p.shape != q.shape:
    raise ValueError(f'`p` and `q` must have the same shape, got {p.shape} '
                     f'and {q.shape}.')
  if not (np.all(np.isfinite(p)) and np.all(np.isfinite(q)) and
          np.all(p >= 0) and np.all(q >= 0)):
    raise ValueError('`p` and `q` must be finite and >= 0.')
  if np.any((p > 0) != (q > 0)):
    return math.inf
  keep = p > 0
  p, q = p[keep], q[keep]
  order = np.argsort(-(q / p), kind='stable')
  p, q = p[order], q[order]
  head_p, head_q = np.cumsum(p)[:-1], np.cumsum(q)[:-1]
  tail_p, tail_q = np.cumsum(p[::-1])[::-1][1:], np.cumsum(q[::-1])[::-1][1:]
  # Φ⁻¹(Q_k) − Φ⁻¹(P_k) from the smaller side of each, for precision.
  zq = np.where(head_q <= tail_q, special.ndtri(head_q), -special.ndtri(tail_q))
  zp = np.where(head_p <= tail_p, special.ndtri(head_p), -special.ndtri(tail_p))
  return float(max(0.0, np.max(zq - zp, initial=0.0)))


def _phi_low(z):
  """A lower bound on Φ(z) under the ndtr assumption, for z >= -37."""
  z = np.asarray(z, np.float64)
  neg = np.minimum(z, 0.0)
  low_neg = (special.ndtr(neg) * (1 - exact_laws.ndtr_relative_error(neg)) *
             (1 - 4 * _U))
  # z > 0: Φ(z) >= 1/2 + z·φ(z) (φ decreases on [0, z]).
  pos = np.maximum(z, 0.0)
  low_pos = (0.5 + pos * np.exp(-0.5 * pos * pos - _LOG_SQRT_2PI) *
             (1 - _LIB - 2 * _U * (1 + pos * pos))) * (1 - 2 * _U)
  return np.where(z <= 0, low_neg, low_pos)


def _phi_high(z):
  """An upper bound on Φ(z) under the ndtr assumption, for -37 <= z <= 0."""
  z = np.asarray(z, np.float64)
  return (special.ndtr(z) / (1 - exact_laws.ndtr_relative_error(z)) *
          (1 + 4 * _U))


def _certified(y, upper: bool):
  """z with Φ(z) >= y (upper) or Φ(z) <= y (lower), certified: ndtri's
  value moved outwards until the ndtr assumption confirms it.

  y in [TAIL/4, 1/2 + 1e-9] (the smaller side of a prefix): z >= -36."""
  y = np.asarray(y, np.float64)
  z = special.ndtri(y)
  step = 1e-14 * (1 + np.abs(z))
  for _ in range(60):
    z_try = z + step if upper else z - step
    ok = (_phi_low(z_try) >= y) if upper else (
        (z_try <= 0) & (_phi_high(np.minimum(z_try, 0.0)) <= y))
    if np.all(ok):
      return z_try
    step = np.where(ok, step, 4 * step)
  raise ArithmeticError('Φ⁻¹ could not be certified (an input outside '
                        '[TAIL/4, 1/2]).')


def _phi_at_least(z_low, z_high):
  """A lower bound on φ over [z_low, z_high] (its farthest end from 0)."""
  z = np.maximum(np.abs(z_low), np.abs(z_high))
  return (np.exp(-0.5 * z * z - _LOG_SQRT_2PI) *
          (1 - _LIB - 2 * _U * (1 + z * z)))


def _mills_high(y: float) -> float:
  """An upper bound on B₀(y) = y/φ(Φ⁻¹(y)), y in [TAIL/4, 1/4] (B₀ increases:
  its derivative (φ + yz)/φ² is positive by the Mills ratio, z = Φ⁻¹(y) < 0)."""
  z_low = float(_certified(np.array([y]), upper=False)[0])
  return y / float(_phi_at_least(z_low, z_low)) * (1 + 4 * _U)


def _interval(value, rel, absolute):
  """[low, high] of a quantity computed as `value` with |value − x| <=
  rel·x + absolute."""
  low = (value - absolute) / (1 + rel) * (1 - 2 * _U)
  high = (value + absolute) / (1 - rel) * (1 + 2 * _U)
  return np.maximum(low, 0.0), high


def _top_pair_terms(o, o_rel, o_abs, p, p_bar, q, q_bar, diff) -> float:
  """max over the others' laws (rows of `o`) and prefixes k of the two terms
  (module docstring) of the top pair (Bern(p) * O, (1−η)Bern(p) + ηBern(q)
  * O), q < p; p_bar, q_bar: 1 − p, 1 − q, and diff: p − q (each within one
  rounding of its exact value, whatever θ: p − q is passed, not formed from
  a rounded 1 − b).

  o: [rows, n] the others' laws, each entry within o_rel·O + o_abs."""
  rows, n = o.shape
  with np.errstate(under='ignore'):
    zero = np.zeros((rows, 1))
    head = np.hstack([zero, np.cumsum(o, axis=1)[:, :-1]])           # F(k−1)
    tail = np.hstack([np.cumsum(o[:, ::-1], axis=1)[:, ::-1][:, 1:], zero])
    # tail: S(k+1); both sums of non-negative terms (no cancellation).
    # Sums of <= n + 1 non-negative terms, times a factor within 2u (1 − b
    # rounded, the product), one addition: the relative error below.
    rel = (1 + o_rel) * (1 + _U)**(n + 8) - 1
    absolute = 4 * (n + 2) * (o_abs + _SUB)
    p_k = head + p_bar * o
    q_k = head + q_bar * o
    p_c = tail + p * o          # 1 − P_k
    q_c = tail + q * o          # 1 − Q_k
    d_k = diff * o
  left = p_k <= TAIL / 2        # true P_k <= TAIL
  right = q_c <= TAIL / 2       # true 1 − Q_k <= TAIL
  bulk = ~(left | right)
  best = 0.0
  if np.any(left | right):
    # Left: D_k/P_k <= (p−q)/p̄ and term 2 <= term 1 (Φ⁻¹ concave below ½);
    # right: D_k/(1−Q_k) <= (p−q)/q bounds term 2 by concavity, and
    # 1 − P_k <= (p/q)·TAIL bounds term 1; B₀ increases.
    ratio = max(p / q, 1.0)
    best = (diff / min(p_bar, q) * _mills_high(ratio * TAIL) *
            (1 + 8 * _U))
  if not np.any(bulk):
    return best
  p_lo, p_hi = _interval(p_k[bulk], rel, absolute)
  q_lo, q_hi = _interval(q_k[bulk], rel, absolute)
  pc_lo, pc_hi = _interval(p_c[bulk], rel, absolute)
  qc_lo, qc_hi = _interval(q_c[bulk], rel, absolute)
  _, d_hi = _interval(d_k[bulk], (1 + o_rel) * (1 + _U)**3 - 1, 2 * o_abs)
  # Φ⁻¹(Q_k) from above, Φ⁻¹(P_k) from below, each from its smaller side.
  q_direct = q_k[bulk] <= q_c[bulk]
  zq_hi = np.where(q_direct, _certified(np.where(q_direct, q_hi, 0.25), True),
                   -_certified(np.where(q_direct, 0.25, qc_lo), False))
  p_direct = p_k[bulk] <= p_c[bulk]
  zp_lo = np.where(p_direct, _certified(np.where(p_direct, p_lo, 0.25), False),
                   -_certified(np.where(p_direct, 0.25, pc_hi), True))
  zp_hi = np.where(p_direct, _certified(np.where(p_direct, p_hi, 0.25), True),
                   -_certified(np.where(p_direct, 0.25, pc_lo), False))
  term2 = (zq_hi - zp_lo) * (1 + 2 * _U) + 1e-300
  term1 = d_hi / _phi_at_least(zp_lo, zp_hi) * (1 + 2 * _U)
  return max(best, float(np.max(term2)), float(np.max(term1)))


def _others_laws(n: int, a: float, b: float, ks):
  """[len(ks), n] laws of Bin(K, a) + Bin(n − 1 − K, b), K in ks, and their
  entries' relative and absolute error bounds."""
  rows, rel = [], 0.0
  with np.errstate(under='ignore'):
    for k in ks:
      la, ea = exact_laws.log_binomial(int(k), a)
      lb, eb = exact_laws.log_binomial(n - 1 - int(k), b)
      rows.append(np.convolve(np.exp(la), np.exp(lb)))
      rel = max(rel, math.exp(float(np.max(ea)) + float(np.max(eb))) - 1)
  # exp's rounding on each factor, the product's, a sum of <= n terms.
  rel = (1 + rel) * (1 + _LIB)**2 * (1 + _U)**(n + 2) - 1
  return np.array(rows), rel, 4 * n * _SUB


@functools.lru_cache(maxsize=256)
def pbm_trial_rate(theta: float, clip: float, num_clients: int) -> float:
  """The proved Gaussian-domination rate κ₁ of the one-trial PBM's n-client
  secure sum: for every target position, any inputs of the others and every
  shift Δ in (0, 2c], T(P, Q) >= G_{κ₁Δ} (module docstring).

  Args:
    theta: PBM's θ, in (0, 1/2) (θ = 1/2 has a deterministic output at ±c:
      no finite rate).
    clip: c > 0.
    num_clients: n >= 1, clients in the secure sum.

  Returns:
    κ₁ > 0, rounded up with every rounding carried (module docstring).

  Raises:
    ValueError: an argument out of range (named).
  """
  theta = float(validation.check_number('theta', theta, 0, 0.5))
  if not 0 < theta < 0.5:
    raise ValueError(f'`theta` must be in (0, 1/2) for a finite rate, got '
                     f'{theta!r}.')
  clip = float(validation.check_positive('clip', clip))
  n = validation.check_integer('num_clients', num_clients, 1)
  mech = pbm.PBM(clip, 2, theta)
  if not mech.positive_everywhere():
    raise ValueError(f'`theta`={theta!r} gives a trial probability of 0 or 1 '
                     'in float64: no finite rate; allowed 0 < theta < 1/2 '
                     'with 1/2 ± theta inside (0, 1).')
  a, b = mech.success_prob(clip), mech.success_prob(-clip)
  diff = a - b   # one rounding (a in [1/2, 1), b in (0, 1/2])
  best = 0.0
  block = max(1, _BLOCK // (n + 1))
  for start in range(0, n, block):
    ks = range(start, min(n, start + block))
    o, rel, absolute = _others_laws(n, a, b, ks)
    # Top pairs; bottom pairs mirrored (outcomes reversed: the others' laws
    # reversed, the target's trial at 1 − b against 1 − a).
    best = max(best,
               _top_pair_terms(o, rel, absolute, a, 1 - a, b, 1 - b, diff),
               _top_pair_terms(o[:, ::-1], rel, absolute, 1 - b, b, 1 - a, a,
                               diff))
  return best / 2 / clip * (1 + 2 * _U)   # 2·c may overflow; best/2 is exact


@dataclasses.dataclass(frozen=True)
class _Trials:
  """A mechanism's sum as `trials` one-trial PBM sums (module docstring):
  a client's trial succeeds with probability α + β·x (x in [−c, c]),
  computed within `error`; `half_width` >= |α − ½| + β·c + error and the
  family's half-width; `slope` <= β."""
  trials: int
  clip: float
  half_width: float
  slope: float
  error: float
  why: str


def _up(value) -> float:
  """A float >= the exact rational `value`."""
  f = float(value)
  return f if fractions.Fraction(f) >= value else math.nextafter(f, math.inf)


def _down(value) -> float:
  """A float <= the exact rational `value`."""
  f = float(value)
  return f if fractions.Fraction(f) <= value else math.nextafter(f, -math.inf)


def _snap_error(extent) -> float:
  """e: a float p computed on a point of extent `extent` is within e of its
  exact value (module docstring)."""
  return base.SNAP_ULPS * 2.0**-53 * max(float(extent), 1.0)


def _affine(trials, clip, alpha, beta, error, why):
  """The `_Trials` of a trial probability p(x) within `error` of α + β·x
  (exact rationals), or, for a p that is not affine, with |p(x) − ½| <=
  |α − ½| + β·|x| + error and |p(x) − p(x')| <= β·|x − x'| + 2·error; or
  None and the reason there is none."""
  if not math.isfinite(2.0 * clip):   # the rate's 1/(2c) would round to 0
    return None, ('no proved Gaussian domination: 2c leaves float64 (c = '
                  f'{clip:.17g}; {why})')
  width = abs(alpha - fractions.Fraction(1, 2)) + beta * fractions.Fraction(
      clip) + fractions.Fraction(error)
  # Past the family's own roundings (`pbm.PBM.success_prob` at ±c: within
  # 2.01·θ'u + u of ½ ± θ'), so every computed p lies in its [b, a].
  half = _up((width * (1 + fractions.Fraction(4 * _U)) +
              fractions.Fraction(2 * _U)))
  if not half < 0.5 - error:   # a trial probability reaches 0 or 1
    return None, ('no finite Gaussian domination: a trial probability '
                  f'reaches 0 or 1 ({why}, half-width {half:.17g})')
  try:   # the family `pbm_trial_rate` builds, checked to hold [½ ∓ width]
    family = pbm.PBM(clip, 2, half)
  except ValueError as err:   # within the sampler's snap radius of ½
    return None, f'no finite Gaussian domination: {err}'
  a, b = family.success_prob(clip), family.success_prob(-clip)
  if not (fractions.Fraction(a) >= fractions.Fraction(1, 2) + width and
          fractions.Fraction(b) <= fractions.Fraction(1, 2) - width):
    return None, ('no proved Gaussian domination: the one-trial family at '
                  f'c = {clip:.17g} does not hold every computed trial '
                  f'probability (θ·c underflows; {why})')
  return _Trials(trials, clip, half, _down(beta), error, why), ''


def _central_bin(mech):
  """RQM's or QMGeo's `_Trials` where [−c, c] lies inside the central bin
  [−h/2, h/2] of its R (even) levels over ±L (module docstring): t =
  (x + L)/h, one trial at t − r, r = R/2 − 1."""
  levels, name = mech.num_levels, mech.name
  if levels % 2:
    return None, (f'no proved Gaussian domination for {name} at an odd '
                  f'number of levels ({levels}): a level at 0 splits the '
                  'inputs over two bins')
  frac = fractions.Fraction
  step, r = frac(mech.level_step), levels // 2 - 1
  walk = 'its kept levels' if name == 'rqm' else 'its walk'
  found, why = _affine(
      1, mech.clip, frac(mech.level_range) / step - r, 1 / step,
      _snap_error(levels - 1),
      f'{name} in its central bin: one trial at (x + L)/h − {r}, then '
      f'{walk}, independent of the inputs')
  if found is None:
    return None, (f'no proved Gaussian domination for {name}: [−c, c] is '
                  'not inside its central bin with room for rounding (a level '
                  f'inside or at ±c: h/2 = {mech.level_step / 2:.17g}, c = '
                  f'{mech.clip:.17g}): ' + why)
  return found, ''


#: An upper bound on φ(0) = 1/√(2π) = 0.398942280401432677939...
_PHI_ZERO_UP = fractions.Fraction('0.39894228040143268')
#: |x̂ − x| <= LATTICE_ULPS·2⁻⁵³·c: the lattice position the sampler mixes
#: (`base.lattice_round`: t = (x + c)/h within 8·2⁻⁵³·(L − 1) of exact,
#: snapped by at most SNAP_ULPS·2⁻⁵³·(L − 1), times h = 2c/(L − 1); each
#: float lattice point −c + i·h within 5.1·2⁻⁵³·c of exact).
LATTICE_ULPS = 2 * (8 + base.SNAP_ULPS) + 6


def _lipschitz_binary(mech, slope, why):
  """The `_Trials` of a two-level mechanism whose up-probability p0(x) is odd
  about ½ (p0(0) = ½) with |p0'| <= `slope` (an exact rational), after the
  input lattice if any (module docstring, "Two levels")."""
  c = mech.input_bound
  if slope <= 0:
    return None, (f'no proved Gaussian domination for {mech.name}: its '
                  'output does not depend on its input (slope 0)')
  reach = fractions.Fraction(LATTICE_ULPS * _U) * fractions.Fraction(c) if (
      mech.lattice) else fractions.Fraction(0)
  return _affine(1, c, fractions.Fraction(1, 2), slope,
                 _up(slope * reach), why)


def _quantized_gaussian_slope(mech):
  """sup |p0'| of the two-level quantized Gaussian: p0(x) = E[(clip(x + σZ,
  ±Cq) + Cq)/(2Cq)], p0'(x) = P(|x + σZ| < Cq)/(2Cq) <= (1 − 2Φ(−Cq/σ))/(2Cq),
  Φ(−t) bounded below through the ndtr assumption at t rounded up."""
  frac = fractions.Fraction
  t = _up(frac(mech.clip) / frac(mech.sigma))
  tail = frac(0)
  if t <= -exact_laws.NDTR_NORMAL_FROM:
    tail = frac(float(special.ndtr(-t))) * (
        1 - frac(float(exact_laws.ndtr_relative_error(t))))
  return min(1 - 2 * tail, frac(1)) / (2 * frac(mech.clip))


def _projection_slope(mech):
  """sup |p0'| of the one-bit randomized projection: the nearest of ±M is
  the sign of x + σZ, kept with probability q, so p0(x) = (1 − q) + (2q −
  1)·Φ(x/σ) and |p0'| <= |2q − 1|·φ(0)/σ."""
  frac = fractions.Fraction
  return abs(2 * frac(mech.q) - 1) * _PHI_ZERO_UP / frac(mech.sigma)


def _trials(mech):
  """`mech`'s binary reduction (module docstring) and '', or None and why
  there is none (in words)."""
  try:
    return _reduction(mech)
  except (OverflowError, ZeroDivisionError):   # a parameter's reciprocal
    return None, (f'no proved Gaussian domination for {mech.name}: its '
                  'parameters fall outside float64\'s range here '
                  f'({mech!r})')


def _reduction(mech):
  """`_trials` for parameters in float64's range."""
  frac = fractions.Fraction
  if isinstance(mech, pbm.PBM):
    return _affine(mech.num_levels - 1, mech.clip, frac(1, 2),
                   frac(mech.theta) / frac(mech.clip), _snap_error(1),
                   f'pbm: {mech.num_levels - 1} trials at ½ + θx/c')
  if isinstance(mech, (rqm.RQM, qmgeo.QMGeo)):
    return _central_bin(mech)
  if isinstance(mech, quantized_gaussian.QuantizedGaussian) and mech.k == 2:
    return _lipschitz_binary(
        mech, _quantized_gaussian_slope(mech),
        'quantized_gaussian at two levels: one trial at p0(x) = E[(clip(x + '
        'σZ, ±Cq) + Cq)/(2Cq)], |p0\'| <= (2Φ(Cq/σ) − 1)/(2Cq)')
  if (isinstance(mech, randomized_projection.RandomizedProjection) and
      mech.bits == 1):
    if mech.sigma == 0:
      return None, ('no proved Gaussian domination for randomized_projection '
                    'at σ = 0: its up-probability jumps at 0')
    return _lipschitz_binary(
        mech, _projection_slope(mech),
        'randomized_projection at one bit: one trial at p0(x) = (1 − q) + '
        '(2q − 1)Φ(x/σ), |p0\'| <= |2q − 1|φ(0)/σ')
  return None, (f'no proved Gaussian domination for {mech.name} here (its '
                'worst family over the others\' inputs is not finite and '
                'small: docs/privacy.md, "Gaussian domination"; the quantized '
                'Gaussian at two levels and the randomized projection at one '
                'bit have one)')


def unavailable(mech, num_clients: int) -> str:
  """Why `rate` has no rate for `mech`'s n-client sum ('' where it has).

  Args:
    mech: a `tff_quant.mechanisms.Mechanism`.
    num_clients: n >= 1.

  Returns:
    The reason in words, for the guarantee's text.
  """
  found, why = _trials(mech)
  if found is None:
    return why
  if num_clients > MAX_CLIENTS:
    return (f'no Gaussian domination above {MAX_CLIENTS} clients (the tail '
            f'bound would bind; {num_clients} here)')
  return ''


def rate(mech, num_clients: int) -> Optional[Rate]:
  """The proved per-coordinate Gaussian-domination rate of `mech`'s
  n-client secure sum, where one is known: PBM, RQM and QMGeo in their
  central bin, the two-level quantized Gaussian and the one-bit randomized
  projection, through the one-trial PBM sum each reduces to (module
  docstring).

  Args:
    mech: a `tff_quant.mechanisms.Mechanism`.
    num_clients: n >= 1.

  Returns:
    A `Rate`, or None (no such argument for this mechanism yet, or n above
    MAX_CLIENTS; its round profile then comes from its RDP curve).

  Raises:
    ValueError: `num_clients` < 1.
  """
  n = validation.check_integer('num_clients', num_clients, 1)
  if unavailable(mech, n):
    return None
  t = _trials(mech)[0]
  kappa = (math.sqrt(t.trials) * (1 + 2 * _U) *
           pbm_trial_rate(t.half_width, t.clip, n))
  return Rate(kappa, (
      f'per-coordinate Gaussian domination at rate κ = {kappa:.6g} '
      f'({t.why}; each one-trial sum T >= G_{{κ₁Δ}} for any others and '
      'positions, proved in closed form with rounding carried)'),
              slack=kappa * 2 * t.error / t.slope * (1 + 4 * _U))
