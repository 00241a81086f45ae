"""The profile route: a round's privacy profile after client sampling, composed by PLD.

Valid for sampling `clients_per_round` of `total_clients` uniformly (fixed
size, without replacement) under replace-one neighbours, for every
mechanism whose un-sampled round has a proved privacy profile
δ_M(ε) = sup H_{e^ε}(M(D) ‖ M(D')) over every neighbouring pair, both
orders, and any inputs of the others (docs/privacy.md, "Subsampling
(WBK19) and composition"). Three steps:

1. δ_M from the round's proved RDP curve (`rdp_profile`: the RDP → (ε, δ)
   conversion of CKS20, Prop. 12, at every order, the least kept), or in
   closed form for the central Gaussian (`gaussian_profile`: Balle & Wang
   2018, Thm 8), the smaller.
2. Amplification by sampling without replacement (`subsampled_profile`):
   a coupling of the fixed-size cohort law and the advanced joint convexity
   of the hockey-stick divergence (Balle, Barthe, Gaboardi 2018, Thm 2)
   give g(ε') = γ·δ_M(log(1 + (e^ε' − 1)/γ)) for ε' >= 0, γ = n/N, for
   both orders of every pair; ε' < 0 follows from
   H_{e^ε}(A‖B) = 1 − e^ε + e^ε·H_{e^-ε}(B‖A).
3. A pair of distributions whose profile lies above g (and its extension)
   everywhere
   (`dominating_pair`: pessimistic connect-the-dots, Doroshenko et al. 2022,
   on the lower convex hull of the grid values), which dominates every
   round (Zhu, Dong, Wang 2022, Def. 7), so its T-fold product dominates the
   adaptive composition (ibid., Thm 10), composed with every rounding
   carried (`composed_epsilon`: the tilted FFT of `common.laws`, not
   dp-accounting's).

Every floating-point step is rounded towards the pessimistic side with a
proved bound (docs/privacy.md, "Numerics", item 5).
"""

import math
from typing import Callable, Mapping

import numpy as np
from dp_accounting.pld import privacy_loss_distribution as pld_lib

from tff_quant.accounting import loss_pmf
from tff_quant.common import exact_laws
from tff_quant.common import validation

#: The PLD loss grid's spacing: the Gaussian's route at z = 2 in the
#: frontier's sampling reads 2e-6 above the same route at 1e-5 (0.913264
#: against 0.913262; profile_route_test).
DEFAULT_INTERVAL = 1e-4
#: The grid's top loss ε_max is the least at which the sampled round's
#: profile is at most TAIL_SHARE·δ/T: the profile's value there goes to the
#: mass at +∞ (pessimistic), so the T rounds' +∞ mass costs at most about
#: TAIL_SHARE·δ.
TAIL_SHARE = 1e-6
#: The largest |loss| on the grid (its profile value, whatever it is, is
#: the mass at +∞).
MAX_LOSS = 64.0

_U = exact_laws.U
_LIB = 2 * exact_laws.ELEMENTARY_ULPS * exact_laws.U   # one elementary function
#: Added to every bound computed in floating point: covers the absolute
#: rounding of results in float64's subnormal range (below 2.3e-308), where
#: relative bounds do not hold.
_TINY = 1e-300

Profile = Callable[[np.ndarray], np.ndarray]


def rdp_profile(rdp: Mapping[float, float], eps) -> np.ndarray:
  """Upper bounds on δ_M(ε), for every pair whose Rényi divergences are at
  most `rdp`: min over orders α of
  exp((α−1)(ρ(α) − ε))·(1 − 1/α)^(α−1)/α (CKS20, Prop. 12; the conversion
  dp-accounting's `compute_epsilon` inverts), 0 from ε >= ρ(∞) on, at most 1.

  A bound of one ordered pair (P, Q) from D_α(P‖Q) alone: where `rdp` bounds
  every ordered pair (the accountant's round RDP does: every target pair in
  both orders, any others), the result bounds both orders' profiles.

  Args:
    rdp: {order α > 1 (math.inf allowed): an upper bound on the Rényi
      divergence at α}, values in [0, inf]; infinite values are skipped.
    eps: ε values (any sign).

  Returns:
    A float64 array of eps' shape, in [0, 1], rounded up by a bound on its
    evaluation (each log-term's few operations, the exp, and 1e-300 for
    results in the subnormal range).

  Raises:
    ValueError: an order <= 1 or a value below 0 (or NaN).
  """
  eps = np.asarray(eps, np.float64)
  out = np.ones_like(eps)
  for a, rho in rdp.items():
    a, rho = float(a), float(rho)
    if not a > 1:
      raise ValueError(f'`rdp` orders must be > 1, got {a}.')
    if not rho >= 0:
      raise ValueError(f'`rdp`[{a}] must be in [0, inf], got {rho}.')
    if not math.isfinite(rho):
      continue
    if math.isinf(a):   # pure: P <= e^ρ Q everywhere, so H_{e^ε} = 0 from ρ on
      out = np.where(eps >= rho * (1 + 2 * _U), 0.0, out)
      continue
    log_c = (a - 1) * math.log1p(-1 / a) - math.log(a)
    with np.errstate(over='ignore'):
      log_d = (a - 1) * (rho - eps) + log_c
      # The product, the subtraction, log1p, log and the sum: at most 4·lib of
      # each term's size, then exp's own lib (relative).
      log_d += 4 * _LIB * ((a - 1) * (rho + np.abs(eps) + 1) + math.log(a) + 1)
      # exp only where this order can lower the bound: elsewhere its term is
      # at least e^(log_d)·(1 + lib) > e^(log(out) + 1e-6) > out (the log's
      # and exp's errors are far below 1e-6), so the minimum is out's.
      with np.errstate(divide='ignore'):
        can = log_d < np.log(out) + 1e-6
      out[can] = np.minimum(out[can], np.exp(log_d[can]) * (1 + _LIB) + _TINY)
  return np.minimum(out, 1.0)


def gaussian_profile(mu: float, eps) -> np.ndarray:
  """Upper bounds on the profile of N(μ, 1) against N(0, 1) (either order,
  the pair is symmetric): Φ(μ/2 − ε/μ) − e^ε·Φ(−μ/2 − ε/μ) (Balle & Wang
  2018, Thm 8), every replace-one pair of a Gaussian mechanism whose ℓ2
  sensitivity over the noise's standard deviation is at most μ.

  Rounded up under the ndtr assumption (`exact_laws.log_normal_cdf`): μ up
  by 4u, the arguments moved outwards by 4u of their terms' size, the first
  Φ bounded above and the second below. Where the two terms cancel the
  result is a loose (still valid) bound; `rdp_profile` is tighter there.

  Args:
    mu: μ > 0.
    eps: ε values >= 0.

  Returns:
    A float64 array of eps' shape, in [0, 1].

  Raises:
    ValueError: μ not finite and > 0, or an ε below 0.
  """
  validation.check_positive('mu', mu)
  eps = np.asarray(eps, np.float64)
  if np.any(eps < 0):
    raise ValueError('`eps` must be >= 0.')
  mu = float(mu) * (1 + 4 * _U)
  ratio = eps / mu
  slack = 4 * _U * (ratio + mu) + 1e-300
  upper_arg = mu / 2 - ratio + slack
  lower_arg = -mu / 2 - ratio - slack
  # Φ(upper_arg) from above: e^(log Φ + err) at t <= 0, else 1 - Φ(-t) below.
  log_up, err_up = exact_laws.log_normal_cdf(-np.abs(upper_arg))
  tail = np.exp(log_up + err_up) * (1 + _LIB)
  tail_low = np.exp(log_up - err_up) * (1 - _LIB)
  first = np.where(upper_arg <= 0, tail, (1 - tail_low) * (1 + 2 * _U))
  log_low, err_low = exact_laws.log_normal_cdf(lower_arg)
  second = np.exp((eps + log_low - err_low) - 2 * _U *
                  (eps + np.abs(log_low)) - 1e-300) * (1 - _LIB)
  # The subtraction and this product: two roundings.
  return np.clip((first - second) * (1 + 4 * _U) + _TINY, 0.0, 1.0)


def subsampled_profile(profile: Profile, gamma: float, eps) -> np.ndarray:
  """g(ε') = γ·δ_M(log(1 + (e^ε' − 1)/γ)), ε' >= 0: the profile of a round
  run on a uniform fixed-size cohort, both orders (docs/privacy.md).

  Args:
    profile: maps ε >= 0 (an array) to upper bounds on δ_M(ε), the
      un-sampled round's profile (sup over every neighbouring pair, both
      orders, any others).
    gamma: n/N in (0, 1].
    eps: ε' values >= 0.

  Returns:
    The upper bounds, float64, in [0, 1]: the argument of δ_M rounded down
    by a bound on log1p(expm1(ε')/γ)'s evaluation (δ_M is non-increasing),
    γ's product up.

  Raises:
    ValueError: γ outside (0, 1] or an ε' below 0.
  """
  validation.check_number('gamma', gamma, 0, 1, low_open=True)
  eps = np.asarray(eps, np.float64)
  if np.any(eps < 0):
    raise ValueError('`eps` must be >= 0.')
  with np.errstate(over='ignore'):
    inner = np.log1p(np.expm1(eps) / gamma)
  # expm1, /γ (γ itself rounded), log1p: relative 3·lib + 4u of the result,
  # since x/(1+x) <= log1p(x).
  inner = inner * (1 - 3 * _LIB - 4 * _U)
  inner = np.where(np.isfinite(inner), inner, np.finfo(np.float64).max)
  return np.minimum(gamma * (1 + 2 * _U) * profile(inner), 1.0)


def binding_order(rdp: Mapping[float, float], gamma: float, delta: float,
                  rounds: int) -> float:
  """The order the route leans on: the finite Rényi order whose
  `rdp_profile` term is least at the un-sampled ε where the sampled round's
  profile (from `rdp`) first drops to δ/T. Calibration keeps the orders up
  to about twice it (`calibration.oracle`); fewer orders only raise ε.

  Args:
    rdp: {order > 1: RDP} as for `rdp_profile`.
    gamma: n/N in (0, 1].
    delta: the target δ in (0, 1).
    rounds: T >= 1.

  Returns:
    The order, or nan where no finite order has a finite value.
  """
  finite = {float(a): float(r) for a, r in rdp.items()
            if math.isfinite(a) and math.isfinite(r)}
  if not finite:
    return math.nan
  coarse = np.arange(0.0, MAX_LOSS, 1e-3)
  g = subsampled_profile(lambda e: rdp_profile(finite, e), gamma, coarse)
  below = np.nonzero(g <= delta / rounds)[0]
  at = coarse[below[0]] if below.size else MAX_LOSS
  inner = math.log1p(math.expm1(at) / gamma)
  log_d = {a: (a - 1) * (r - inner) + (a - 1) * math.log1p(-1 / a) - math.log(a)
           for a, r in finite.items()}
  return min(sorted(log_d), key=log_d.get)


def _grid_top(profile: Profile, gamma: float, floor: float,
              interval: float) -> int:
  """The least grid index k with g(k·interval) <= floor (MAX_LOSS at most)."""
  coarse = np.arange(0.0, MAX_LOSS + 1e-9, 1e-2)
  g = subsampled_profile(profile, gamma, coarse)
  below = np.nonzero(g <= floor)[0]
  top = coarse[below[0]] if below.size else MAX_LOSS
  return max(1, int(math.ceil(top / interval)))


def _lower_hull(t: np.ndarray, y: np.ndarray) -> np.ndarray:
  """Indices of the lower convex hull of the points (t, y), t increasing
  (Andrew's monotone chain; only the tightness of the route rests on it).
  On Python floats: the same IEEE products as numpy's float64 scalars, and
  4x faster than on them over a 60,001-point profile."""
  t, y = np.asarray(t, np.float64).tolist(), np.asarray(y, np.float64).tolist()
  hull = []
  for i in range(len(t)):
    while len(hull) >= 2:
      i1, i2 = hull[-2], hull[-1]
      if (y[i2] - y[i1]) * (t[i] - t[i1]) >= (y[i] - y[i1]) * (t[i2] - t[i1]):
        hull.pop()
      else:
        break
    hull.append(i)
  return np.asarray(hull, int)


def _masses(k: np.ndarray, y: np.ndarray, interval: float):
  """(masses, bounds): the connect-the-dots masses p_i = t_i(s_i − s_{i−1})
  of the interpolation through (0, 1), (t_i, y_i) (t_i = e^(k_i·interval))
  and constant after the last, and a bound on each one's rounding."""
  eps = k * interval
  t = np.exp(eps)
  # t_i: exp's lib and the product k·interval's u·|ε|.
  r_t = _LIB + 2 * _U * (np.abs(eps) + 1)
  gap = np.diff(eps)
  dt = t[:-1] * np.expm1(gap)
  r_dt = r_t[:-1] + _LIB + _U * (gap + 2) + _U
  s = np.concatenate([[(y[0] - 1.0) / t[0]], np.diff(y) / dt, [0.0]])
  r_s = np.concatenate([[r_t[0] + 2 * _U], r_dt + 2 * _U, [0.0]])
  p = t * np.diff(s)
  err = (t * (r_s[1:] * np.abs(s[1:]) + r_s[:-1] * np.abs(s[:-1])) +
         np.abs(p) * (r_t + 2 * _U)) * (1 + 1e-6) + 1e-300
  return p, err


def dominating_pair(profile: Profile, gamma: float, delta: float, rounds: int,
                    interval: float = DEFAULT_INTERVAL):
  """A pair that dominates every sampled round (docs/privacy.md), as the
  privacy-loss masses of its first law.

  The sampled round's profile G on the grid ε_k = k·interval, |k| <= K
  (g for ε >= 0, 1 − e^ε + e^ε·g(−ε) below), made non-increasing (a running
  minimum: the true profile is), then the lower convex hull in t = e^ε of
  (0, 1) and those points, minus every vertex whose connect-the-dots mass is
  not provably positive. The interpolation L through what remains (constant
  after the last vertex) lies above the true profile (chords of upper
  bounds of a convex function, and it is non-increasing), and is the
  profile of the pair with masses p_i at losses ε_i and L's last value at
  +∞ (all positive, P's total 1). The masses handed over are each p_i's
  rounding bound above p_i: every composed hockey-stick divergence is
  non-decreasing in each mass, so the composition stays above the pair's.

  Args:
    profile: the un-sampled round's δ_M (`subsampled_profile`).
    gamma: n/N in (0, 1].
    delta: the target δ (sets the grid's top with `rounds`: TAIL_SHARE).
    rounds: T >= 1.
    interval: the loss grid's spacing, > 0.

  Returns:
    (masses, infinity): {k: the mass at loss k·interval} and the mass at
    +∞ (the pair is symmetric: one PLD serves both orders).

  Raises:
    ValueError: an argument out of range (named).
  """
  validation.check_positive('interval', interval)
  validation.check_probability('delta', delta)
  validation.check_integer('rounds', rounds, 1)
  top = _grid_top(profile, gamma, TAIL_SHARE * delta / rounds, interval)
  k = np.arange(-top, top + 1)
  eps = k * interval
  # Each ε_k is evaluated a little lower (the product's rounding): G is
  # non-increasing.
  eps_eval = eps - 2 * _U * np.abs(eps)
  g = subsampled_profile(profile, gamma, np.abs(eps_eval))
  neg = eps_eval < 0
  below = (-np.expm1(eps_eval) + np.exp(eps_eval) * g) * (1 + 4 * _LIB)
  y = np.minimum(np.where(neg, below, g), 1.0)
  y = np.minimum.accumulate(y)
  keep = _lower_hull(np.concatenate([[0.0], np.exp(eps)]),
                     np.concatenate([[1.0], y]))
  keep = keep[keep > 0] - 1
  while True:
    p, err = _masses(k[keep], y[keep], interval)
    ok = p > err
    if ok.all():
      break
    keep = keep[ok]
    if not keep.size:   # no mass provably positive: the chord from (0, 1)
      keep = np.array([len(k) - 1])   # to the last point, then constant
      p, err = _masses(k[keep], y[keep], interval)
      p = np.maximum(p, 0.0)   # 1 - y >= 0 in exact arithmetic
      break
  masses = dict(zip(k[keep].tolist(), (p + err).tolist()))
  return masses, float(y[keep[-1]])


def dominating_pld(profile: Profile, gamma: float, delta: float, rounds: int,
                   interval: float = DEFAULT_INTERVAL
                   ) -> pld_lib.PrivacyLossDistribution:
  """`dominating_pair` as a dp-accounting `PrivacyLossDistribution`
  (symmetric, pessimistic): for reading its profile with dp-accounting.

  Args, Raises: as `dominating_pair`.

  Returns:
    The PLD.
  """
  masses, infinity = dominating_pair(profile, gamma, delta, rounds, interval)
  return pld_lib.PrivacyLossDistribution.create_from_rounded_probability(
      masses, infinity, interval)


def profile_epsilon(profile: Profile, gamma: float, rounds: int, delta: float,
                    interval: float = DEFAULT_INTERVAL) -> float:
  """ε after `rounds` sampled rounds by the profile route (module docstring).

  Args:
    profile: the un-sampled round's δ_M, for every pair both orders (an
      array of ε >= 0 to upper bounds).
    gamma: the sampling rate n/N in (0, 1].
    rounds: T >= 1.
    delta: target δ in (0, 1).
    interval: the PLD loss grid's spacing, > 0.

  Returns:
    The least ε on the composed PLD with δ(ε) <= delta (inf where none).

  Raises:
    ValueError: an argument out of range (named).
  """
  masses, infinity = dominating_pair(profile, gamma, delta, rounds, interval)
  return composed_epsilon(masses, infinity, rounds, delta, interval)


def composed_epsilon(masses: Mapping[int, float], infinity: float, rounds: int,
                     delta: float, interval: float) -> float:
  """The least ε with δ_T(ε) <= `delta` (`composed_delta`'s bound, which is
  non-increasing in ε), by bisection to 1e-9 relative (the upper end).

  Args:
    masses, infinity, rounds, interval: as for `composed_delta`.
    delta: the target δ in (0, 1).

  Returns:
    ε (inf where no ε meets `delta`).

  Raises:
    ValueError: an argument out of range (named).
  """
  validation.check_probability('delta', delta)
  delta_at, top = composed_delta(masses, infinity, rounds, interval,
                                 tail=1e-7 * delta)
  lo, hi = 0.0, max(top, 1.0)
  if delta_at(lo) <= delta:
    return 0.0
  if delta_at(hi) > delta:
    return math.inf
  while hi - lo > 1e-9 * hi:
    mid = (lo + hi) / 2
    lo, hi = (mid, hi) if delta_at(mid) > delta else (lo, mid)
  return hi


def composed_delta(masses: Mapping[int, float], infinity: float, rounds: int,
                   interval: float, tail: float = 1e-12):
  """An upper bound on δ_T(ε) after T-fold composition of a pair, every
  rounding of the composition carried (not dp-accounting's).

  The pair's first law has mass p_k at loss k·interval and `infinity` at
  +∞; T rounds give δ_T(ε) = 1 − (1 − m_∞)^T + Σ_s (1 − e^(ε − s·interval))⁺
  ·P_T(s), P_T the T-fold convolution of the finite masses (the T-fold
  product of a dominating pair dominates the composition: Zhu, Dong, Wang
  2022, Thm 10). Bounded above as follows.
  * A window [a, b] of the sum's index s: Chernoff bounds with the masses'
    log-MGF K(λ) = log Σ p_k e^(λk) (raised by 1e-9 + 1e-12|K| for its
    rounding: a pairwise sum and a few elementary functions) put at most
    τ = `tail` of mass above b and below a (`loss_pmf.sum_window`).
  * One FFT of size N >= b − a + 1 (a power of 2): the circular T-fold
    convolution, by binary powering (`laws.complex_power`). Circularly, the
    mass outside [a, b] lands inside it: entries only rise (c >= 0), so
    Σ c·P_T over the window is at most Σ c·(circular); the mass above b,
    where c could be larger than where it lands, is added as τ.
  * The FFT's error in 2-norm E (`laws.fft_error`: the transforms' and the
    powers' roundings from the spectra's moduli): Σ c·(computed − exact) <=
    ||c||_2·E.
  * Each c = (1 − e^(ε − l))⁺ raised by its rounding (l = s·interval: u;
    the difference 2.01u(|ε| + |l|); expm1's lib), the sum of products by
    64u, the +∞ term by 8·lib.

  Args:
    masses: {integer k: mass >= 0}.
    infinity: the mass at +∞, in [0, 1].
    rounds: T >= 1.
    interval: the loss grid's spacing, > 0.
    tail: τ in (0, 1): the mass each Chernoff cut may leave out.

  Returns:
    (δ_T, top): δ_T(ε) the bound as a function of ε >= 0 (non-increasing),
    and the largest |loss| in the window.

  Raises:
    ValueError: an argument out of range (named).
  """
  validation.check_integer('rounds', rounds, 1)
  validation.check_number('infinity', infinity, 0, 1)
  validation.check_positive('interval', interval)
  validation.check_probability('tail', tail)
  ks = np.fromiter(masses.keys(), np.int64, len(masses))
  vs = np.fromiter(masses.values(), np.float64, len(masses))
  ks, vs = ks[vs > 0], vs[vs > 0]
  at_infinity = loss_pmf.raised_power_of_one_minus(infinity, rounds)
  if not ks.size or infinity == 1:
    return (lambda eps: min(at_infinity, 1.0)), 0.0
  k_lo = int(ks.min())
  p = np.zeros(int(ks.max()) - k_lo + 1)
  p[ks - k_lo] = vs
  lo_s, values, error2 = loss_pmf.circular_power(p, k_lo, rounds, tail)
  s = np.arange(lo_s, lo_s + values.size, dtype=np.int64)
  losses = s.astype(np.float64) * interval
  top = float(np.max(np.abs(losses)))

  def delta_at(eps: float) -> float:
    # The losses above the cut: a suffix (they are non-decreasing in s).
    near = np.searchsorted(losses, eps - 4.03 * _U * (abs(eps) + top),
                           side='right')
    l = losses[near:]
    share = np.minimum(np.maximum(-np.expm1(eps - l), 0.0) * (1 + _LIB) +
                       2.01 * _U * (abs(eps) + np.abs(l)), 1.0)
    total = float(np.sum(share * values[near:]))
    spread = float(np.linalg.norm(share)) * (1 + share.size * _U) * error2
    return (at_infinity + tail + (max(total, 0.0) + spread) * (1 + 64 * _U)
            + _TINY)

  return delta_at, top

