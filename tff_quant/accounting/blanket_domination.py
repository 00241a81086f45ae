"""Gaussian domination above two levels: the others' blanket as a mixture over
their count, concentrated over coordinates (docs/privacy.md, "Gaussian
domination above two levels").

For the quantized Gaussian above two levels and the randomized projection
above one bit, with the input lattice (`base.InputLattice`, V points, step
h = 2c/(V − 1)): a client's law at x = (1 − s)·v_i + s·v_{i+1} is
p_x = (1 − s)π_i + s·π_{i+1}, π_i the vertex laws. Three steps.

A. Per count (`_cell_rate`, `_count_rate`). For a fixed law O of the
   others' sum, let A = π_i * O, B = π_{i+1} * O. Within cell i, P_s =
   (1 − s)A + sB, and for s > s' the likelihood ratio P_s/P_s' increases in
   B/A, so the Neyman–Pearson sets of (P_s', P_s) are the same sets E for
   every s' < s: the outcomes with B/A above a threshold. By the kink
   formula (`gaussian_domination`), μ*(P_s', P_s) = max_E [F_E(s) −
   F_E(s')], F_E(s) = Φ⁻¹(A(E) + s·D(E)), D = B − A; F_E' = D(E)/I(P_s(E)),
   I = φ∘Φ⁻¹ concave and symmetric about ½, so its least value on the
   segment is at an end, and μ* <= (s − s')·max_E D(E)/min(I(A(E)),
   I(B(E))). Across cells, T(P, R) >= G_a and T(R, Q) >= G_b give T(P, Q)
   >= G_{a+b} (β_Q(φ) >= G_b(E_R φ) >= G_b(1 − G_a(α)) = G_{a+b}(α): the
   argument of Dong, Roth, Su 2022, Thm 2.14); chaining x to x' through the
   vertices between, T(p_x * O, p_x' * O) >= G_{κ(O)|x − x'|},
   κ(O) = max_i max_E D(E)/min(I(A(E)), I(B(E)))/h.
   Adding more independent input-free noise to O cannot raise μ* (data
   processing), so κ(R^{*m}) bounds every count above m.
B. Per coordinate (Balle, Bell, Gascón, Nissim 2019's blanket, as in
   `others`): every vertex law is >= β·R, R the vertex laws' common part
   (`blankets.common_part`), so every input's law is. Each other client
   draws from R with probability β, independently, else from a remainder;
   given who did (M ~ Binomial(n − 1, β), input-free), the shifts and the
   remainders, the sum is the target's output plus a constant plus R^{*M}.
   Both laws of the target's pair are mixtures with the same weights, and
   H_γ is jointly convex: H_γ(P, Q) <= E_M H_γ(p_x * R^{*M}, p_x' * R^{*M}).
   (A single Gaussian rate per coordinate at the mean count is not true in
   general: the randomized projection at two bits, n = 2, has μ* 1.001x
   κ(R^{*(n−1)})·Δ.)
C. Per round (`MixtureRate.round_mu`). The d coordinates' counts M_j are
   independent and no input moves them. Given all of them, the round's view
   is a product over coordinates, dominated by G_{μ(M)}, μ(M)² = Σ_j
   Z_j·Δ_j², Z_j = κ_{g(M_j)}² (DRS22 Thm 3.2, Cor. 3.3), g(m) the largest
   evaluated count <= m. With ‖Δ‖₂ <= S and |Δ_j| <= 2c, a_j = Δ_j²/S² lies
   in [0, 1/N], N = S²/(4c²), Σ a_j <= 1. For any c0 >= 0 and λ > 0, f(a) =
   log E e^{λa(Z − c0)} is convex with f(0) = 0, so Σ_j f(a_j) <=
   max(0, N·f(1/N)), and P(Σ a_j Z_j > c0 + u) <= exp(−λu + max(0,
   N·f(1/N))) =: t for every admissible Δ at once (Chernoff). H_γ(G_μ)
   increases in μ and is at most 1, so the round's H_γ <= H_γ(N(0, 1),
   N(μ', 1)) + t, μ' = S·√(c0 + u): the profile of the pair ((1 − t)N(0, 1)
   + t·δ_⊥, (1 − t)N(μ', 1) + t·δ_⊤) (Zhu, Dong, Wang 2022, Def. 7), both
   orders. `composition` adds t (ROUND_TAIL) to the round's Gaussian profile.

Every step is bounded with its rounding carried: the vertex laws within the
mechanism's `log_pmf_error`, the blanket's β certified downwards (the
binomial at that float β, `exact_laws.log_binomial`), every convolution and
prefix sum in log space over the whole support with a uniform error bound
(sums of non-negative terms), D(E) from whichever side has no cancellation
(D(E) <= Σ_E (B − A)⁺ and D(E) = −D(Eᶜ) <= Σ_{Eᶜ} (A − B)⁺), Φ⁻¹ certified
through `exact_laws.log_normal_cdf`. The sets E are taken from the computed
likelihood ratios: each true set lies between two computed prefixes whose
ratios differ by at most twice their error bound, and every bound is taken
over that sandwich, so no ordering is assumed (the randomized projection's
ratio is not monotone in the level). The lattice's float positions add
κ·2·LATTICE_ULPS·2⁻⁵³·c per coordinate, as at two levels.
"""

import dataclasses
import fractions
import functools
import math
from typing import Optional, Tuple

import numpy as np
from scipy import special

from tff_quant.accounting import gaussian_domination
from tff_quant.accounting import numerics
from tff_quant.common import exact_laws
from tff_quant.common import validation
from tff_quant.mechanisms import quantized_gaussian
from tff_quant.mechanisms import randomized_projection

_U = exact_laws.U
_LIB = 2 * exact_laws.ELEMENTARY_ULPS * exact_laws.U   # one elementary function
_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)
#: t: each round's profile carries this additive term (step C); over T
#: rounds the composed δ grows by at most about T·γ·t.
ROUND_TAIL = 1e-14
#: The most log-space terms the convolutions may evaluate (about 1 ns each
#: here): above it `rate` declines and the RDP curve's profile serves.
MAX_TERMS = 3e10
#: Counts within this many standard deviations of the mean count are each
#: evaluated; below, a geometric grid (ratio _GEOMETRIC) reaches down to 0.
_SPREAD = 7.0
_GEOMETRIC = 0.85
#: The Chernoff step's λ/N grid: this many points, log-spaced.
_LAMBDAS = 400


def _above(x, e):
  """A float >= the real x + e for float arrays x (−inf kept) and e >= 0:
  the sum's rounding (u·|y|) covered by 3u·|y|, itself rounded."""
  with np.errstate(invalid='ignore'):
    y = x + e
    return np.where(np.isfinite(y), y + 3 * _U * np.abs(y), y)


def _below(x, e):
  """A float <= the real x − e (`_above`'s mirror)."""
  with np.errstate(invalid='ignore'):
    y = x - e
    return np.where(np.isfinite(y), y - 3 * _U * np.abs(y), y)


def _log_convolve(la: np.ndarray, ea: float, lb: np.ndarray, eb: float
                  ) -> Tuple[np.ndarray, float]:
  """The log of the convolution of two non-negative sequences from their
  logs (−inf for 0), with a uniform bound on its error.

  Each output is m + log Σ_l e^{x_l − m}, x_l = la[l] + lb[j − l], m the
  largest: the inputs' errors pass through (ea + eb); the sum x_l rounds by
  u·|x_l|; x_l − m by u·|x_l − m|, which moves e^{x_l − m} by at most u/e
  (y·e^y <= 1/e); exp adds lib relative; K positive terms summed add K·u
  relative (the sum is >= 1: the largest term is e^0 exactly); log adds
  lib·log K; the final addition u·|result|.

  Args:
    la, ea: a sequence's logs and their error bound.
    lb, eb: the other's.

  Returns:
    (logs of the convolution, its error bound).
  """
  if la.size > lb.size:
    la, ea, lb, eb = lb, eb, la, ea
  k, n = la.size, la.size + lb.size - 1
  top = np.full(n, -np.inf)
  for l in range(k):
    if np.isfinite(la[l]):
      np.maximum(top[l:l + lb.size], la[l] + lb, out=top[l:l + lb.size])
  total = np.zeros(n)
  safe = np.where(np.isfinite(top), top, 0.0)
  with np.errstate(under='ignore', invalid='ignore'):
    for l in range(k):
      if np.isfinite(la[l]):
        total[l:l + lb.size] += np.exp((la[l] + lb) - safe[l:l + lb.size])
  with np.errstate(divide='ignore'):
    out = np.where(np.isfinite(top), top + np.log(total), -np.inf)
  finite_a, finite_b = la[np.isfinite(la)], lb[np.isfinite(lb)]
  x_max = float(np.max(np.abs(finite_a)) + np.max(np.abs(finite_b)))
  out_max = float(np.max(np.abs(out[np.isfinite(out)])))
  relative = k * (_U / math.e + _LIB + 1.01 * _U) + k * math.exp(-700)
  err = (ea + eb + _U * x_max * 1.01 - math.log1p(-relative) +
         _LIB * math.log(k + 1) + _U * out_max) * (1 + 1e-6)
  return out, err


def _accumulate(logs: np.ndarray, err: float) -> Tuple[np.ndarray, float]:
  """Running log-sums (np.logaddexp.accumulate) of non-negative terms from
  their logs, and a uniform error bound: the inputs' error passes through,
  each step adds `exact_laws.log_add_error` (K steps at most)."""
  out = np.logaddexp.accumulate(logs)
  finite = out[np.isfinite(out)]
  top = float(np.max(np.abs(finite))) if finite.size else 0.0
  return out, err + logs.size * exact_laws.log_add_error(top)


def _log_quantile_low(log_p: np.ndarray) -> np.ndarray:
  """z <= Φ⁻¹(e^{log_p}) (<= 0), certified through `exact_laws.log_normal_cdf`
  (log Φ(z) + its error <= log p). log_p <= log ½."""
  z = np.minimum(special.ndtri_exp(log_p), 0.0)
  step = 1e-13 * (1 + np.abs(z))
  for _ in range(80):
    value, err = exact_laws.log_normal_cdf(z)
    ok = value + err <= log_p
    if np.all(ok):
      return z
    z = np.where(ok, z, z - step)
    step = np.where(ok, step, 2 * step)
  raise ArithmeticError('Φ⁻¹ could not be certified.')


def _log_i_low(log_p: np.ndarray) -> np.ndarray:
  """A lower bound on log I(p) = log φ(Φ⁻¹(p)) for every p whose smaller side
  min(p, 1 − p) is >= e^{log_p}: I increases on [0, ½]."""
  z = _log_quantile_low(np.minimum(log_p, -math.log(2.0)))
  value = -0.5 * z * z - _LOG_SQRT_2PI
  return value - (_U * (z * z + 2.0) + _U * np.abs(value)) * 2


def _cell_rate(la: np.ndarray, ea: float, lb: np.ndarray, eb: float) -> float:
  """max over the Neyman–Pearson sets E of (A, B) of D(E)/min(I(A(E)),
  I(B(E))), bounded above (module docstring, A), from the logs of A and B
  and their error bounds; inf where one has mass the other lacks."""
  fa, fb = np.isfinite(la), np.isfinite(lb)
  if np.any(fa != fb):
    return math.inf
  la, lb = la[fa], lb[fa]
  if la.size < 2:
    return 0.0
  ratio = lb - la
  # |computed − exact log-ratio| <= ea + eb + u·|ratio| (the subtraction);
  # 4u more covers the roundings of ratio ± e_ratio below.
  e_ratio = (ea + eb + 4 * _U * float(np.max(np.abs(ratio)))) * (1 + 1e-6)
  order = np.argsort(-ratio, kind='stable')
  ratio, la, lb = ratio[order], la[order], lb[order]
  size = la.size
  with np.errstate(divide='ignore'):
    up = np.log(np.expm1(np.maximum(ratio + e_ratio, 0.0)))
    down = np.log(-np.expm1(np.minimum(ratio - e_ratio, 0.0)))
  # log(expm1(·)): expm1's relative lib, then log's lib relative to its value.
  margin_up = 2 * _LIB * (1 + np.where(np.isfinite(up), np.abs(up), 0.0))
  margin_down = 2 * _LIB * (1 + np.where(np.isfinite(down), np.abs(down), 0.0))
  # (B − A)⁺ and (A − B)⁺ per outcome, bounded above through A's upper bound.
  plus = _above(_above(la, up), ea + margin_up)
  minus = _above(_above(la, down), ea + margin_down)
  a_low, b_low = _below(la, ea), _below(lb, eb)
  # Prefix sums (the first k outcomes) and suffix sums (from k on).
  pre_a, e_pa = _accumulate(a_low, 0.0)
  pre_b, e_pb = _accumulate(b_low, 0.0)
  suf_a, e_sa = _accumulate(a_low[::-1], 0.0)
  suf_b, e_sb = _accumulate(b_low[::-1], 0.0)
  suf_a, suf_b = suf_a[::-1], suf_b[::-1]
  pre_plus, e_pp = _accumulate(plus, 0.0)
  suf_minus, e_sm = _accumulate(minus[::-1], 0.0)
  suf_minus = suf_minus[::-1]
  # Clusters: runs of outcomes whose consecutive computed ratios are within
  # 2e. Across clusters the true order is the computed one, so a true set E
  # is a run of whole clusters, then part of at most one: with L_k the
  # first k outcomes, L_lo ⊆ E ⊆ L_hi, lo = hi = k at a cut between clusters
  # and [lo, hi) the cluster where the cut k falls inside one.
  cut = np.arange(1, size)
  joined = ratio[:-1] - ratio[1:] <= 2 * e_ratio   # cut k inside a cluster
  lo = np.maximum.accumulate(np.where(joined, 0, cut))   # the last cut <= k
  hi = np.minimum.accumulate(np.where(joined, size, cut)[::-1])[::-1]
  neg_inf = np.array([-np.inf])
  # log A(E) >= log A(L_lo); for lo = 0, E is not empty: >= its least outcome.
  first_a = np.concatenate([neg_inf, _below(pre_a, e_pa)])[lo]
  first_b = np.concatenate([neg_inf, _below(pre_b, e_pb)])[lo]
  least_a = np.minimum.accumulate(a_low)[hi - 1]
  least_b = np.minimum.accumulate(b_low)[hi - 1]
  low_a = np.where(lo == 0, least_a, first_a)
  low_b = np.where(lo == 0, least_b, first_b)
  # log A(Eᶜ) >= log A(L_hiᶜ); where hi is every outcome, Eᶜ is not empty
  # and lies in L_loᶜ: >= its least outcome.
  rest_a = np.concatenate([_below(suf_a, e_sa), neg_inf])[hi]
  rest_b = np.concatenate([_below(suf_b, e_sb), neg_inf])[hi]
  last_a = np.minimum.accumulate(a_low[::-1])[::-1][lo]
  last_b = np.minimum.accumulate(b_low[::-1])[::-1][lo]
  comp_a = np.where(hi == size, last_a, rest_a)
  comp_b = np.where(hi == size, last_b, rest_b)
  smallest = np.minimum(np.minimum(low_a, low_b), np.minimum(comp_a, comp_b))
  # D(E) <= Σ_{L_hi} (B − A)⁺ and <= Σ_{L_loᶜ} (A − B)⁺.
  d_plus = _above(pre_plus[hi - 1], e_pp)
  d_minus = _above(suf_minus[lo], e_sm)
  log_d = np.minimum(d_plus, d_minus)
  with np.errstate(over='ignore', invalid='ignore'):
    diff = log_d - _log_i_low(smallest)
    bounds = np.exp(diff) * (1 + _LIB + 4 * _U + 2 * _U * np.abs(diff))
  bounds = np.where(np.isneginf(log_d), 0.0, bounds)
  return float(np.max(bounds))


def _count_rate(log_o: np.ndarray, e_o: float, vertices: np.ndarray,
                e_v: float, step: float) -> float:
  """κ(O) (module docstring, A) bounded above: the largest cell rate over
  the lattice's cells, over the step h (rounded down)."""
  best = 0.0
  previous = _log_convolve(vertices[0], e_v, log_o, e_o)
  for i in range(1, vertices.shape[0]):
    current = _log_convolve(vertices[i], e_v, log_o, e_o)
    best = max(best, _cell_rate(*previous, *current))
    previous = current
  return best / step * (1 + 4 * _U)


def _counts(others: int, beta: float) -> np.ndarray:
  """The counts at which κ is evaluated: every count within _SPREAD
  standard deviations below the mean of Binomial(others, β) and above, and
  a geometric grid from there down to 0 (increasing)."""
  mean = others * beta
  sd = math.sqrt(others * beta * (1 - beta))
  low = max(0, min(others, int(math.floor(mean - _SPREAD * sd - 1))))
  grid = set(range(low, others + 1))
  m = low
  while m > 0:
    m = int(math.floor(m * _GEOMETRIC))
    grid.add(m)
  grid.add(0)
  return np.array(sorted(grid), dtype=np.int64)


@dataclasses.dataclass(frozen=True)
class MixtureRate(gaussian_domination.Rate):
  """A round's Gaussian domination from per-count rates (module docstring).

  Attributes (beyond `gaussian_domination.Rate`'s, where `rate` is κ at
  every other client in the blanket and `tail` is t):
    clip: c, each coordinate's input bound (|Δ_j| <= 2c).
    counts: the evaluated counts g, increasing, from 0.
    squares: κ_g² rounded up at each.
    weights_low, weights_high: bounds on P(g(M) = g) for each.
  """
  clip: float = 1.0
  counts: Tuple[int, ...] = ()
  squares: Tuple[float, ...] = ()
  weights_low: Tuple[float, ...] = ()
  weights_high: Tuple[float, ...] = ()

  def round_mu(self, sensitivity: float, dim: int) -> float:
    """μ' of the Gaussian pair that, with t added, dominates a round whose
    change has ℓ2 norm <= `sensitivity` over `dim` coordinates (module
    docstring, C), plus the lattice's float slack s·√d; rounded up.

    Args:
      sensitivity: S > 0.
      dim: d >= 1.

    Returns:
      μ' > 0.
    """
    z = np.asarray(self.squares)
    w_low, w_high = np.asarray(self.weights_low), np.asarray(self.weights_high)
    # N = S²/(4c²), rounded down (a smaller N only weakens the bound).
    n_eff = max(sensitivity * sensitivity / (4 * self.clip * self.clip) *
                (1 - 8 * _U), 1e-300)
    c0 = float(np.sum(w_high * z)) * (1 + (z.size + 4) * _U)   # >= E Z
    spread = max(float(z[-1] if z.size else 0.0), 1e-300)
    lam = np.logspace(-3, 9, _LAMBDAS)[:, None] / spread   # λ/N
    with np.errstate(all='ignore'):
      y = lam * (z[None, :] - c0)
      g = np.expm1(y)
      # E e^{λ(Z − c0)/N} − 1 = Σ w·(e^... − 1) (Σ w = 1), each weight taken
      # at the end that makes its term largest; each term's rounding (the
      # product and difference in y: 3u·|y| through expm1, then expm1, the
      # weight's product and the sum) added. An argument error δ moves
      # expm1(y) by about δ·e^y, relative δ·e^y/|e^y − 1| <= 3u(|y| + 1)
      # at δ = 3u|y| (y·e^y/(e^y − 1) <= y + 1 for y >= 0, <= 1 below).
      terms = np.where(g > 0, w_high[None, :] * g, w_low[None, :] * g)
      v = np.sum(terms, axis=1) + np.sum(
          np.abs(terms) * (_LIB + (z.size + 4) * _U +
                           3.01 * _U * (np.abs(y) + 1)), axis=1)
    with np.errstate(all='ignore'):
      log_mgf = np.where(v > -1, np.log1p(v) * (1 + _LIB) + _U, math.inf)
      need = (math.log(1 / ROUND_TAIL) + np.maximum(0.0, n_eff * log_mgf)
              ) / (n_eff * lam[:, 0]) * (1 + 8 * _U)
    u = float(np.min(need[np.isfinite(need)])) if np.any(
        np.isfinite(need)) else math.inf
    # Σ a_j Z_j <= max Z always (Σ a_j <= 1).
    bound = min(c0 + u, float(np.max(z)))
    mu = sensitivity * math.sqrt(bound * (1 + 2 * _U)) * (1 + 4 * _U)
    return (mu + self.slack * math.sqrt(dim)) * (1 + 4 * _U)


def unavailable(mech, num_clients: int) -> str:
  """Why `rate` has no rate for `mech`'s n-client sum ('' where it has one):
  the two-level route's (`gaussian_domination.unavailable`) where it
  applies, else this module's (the quantized Gaussian above two levels and
  the randomized projection above one bit, with the input lattice, within
  MAX_TERMS).

  Args:
    mech: a `tff_quant.mechanisms.Mechanism`.
    num_clients: n >= 1.

  Returns:
    The reason in words, for the guarantee's text.
  """
  n = validation.check_integer('num_clients', num_clients, 1)
  two_level = gaussian_domination.unavailable(mech, n)
  if not two_level:
    return ''
  many = ((isinstance(mech, quantized_gaussian.QuantizedGaussian) and
           mech.k > 2) or
          (isinstance(mech, randomized_projection.RandomizedProjection) and
           mech.bits > 1 and mech.sigma > 0))
  if not many:
    return two_level
  if mech.lattice < 2:
    return (f'no proved Gaussian domination for {mech.name} without the '
            'input lattice (its law is not piecewise affine in the input)')
  terms = _cost(mech, n)
  if terms > MAX_TERMS:
    return (f'no Gaussian domination for {mech.name} here: its blanket '
            f'mixture would evaluate {terms:.3g} log-space terms, above '
            f'MAX_TERMS = {MAX_TERMS:.3g}')
  if _mixture_rate(type(mech), _key(mech), n) is None:
    return (f'no finite Gaussian domination for {mech.name} here: its vertex '
            'laws have no common part, or a per-count rate leaves float64 '
            '(laws nearly deterministic)')
  return ''


def _cost(mech, num_clients: int) -> float:
  """Log-space terms `rate` evaluates for `mech` (with the lattice) at n
  clients: the others' sum built one client at a time (two passes of
  |R|·(m(|R| − 1) + 1) terms each), and at each evaluated count g every
  vertex law convolved with R^{*g}."""
  blanket = _blanket(type(mech), _key(mech))
  if blanket is None:
    return 0.0
  vertices, _, log_r, _, beta = blanket
  size, levels = log_r.size, vertices.shape[1]
  others = num_clients - 1
  build = sum(2.0 * size * (m * (size - 1) + 1) for m in range(others))
  evaluate = sum(2.0 * vertices.shape[0] * levels * (g * (size - 1) + 1)
                 for g in _counts(others, beta).tolist())
  return build + evaluate


def rate(mech, num_clients: int) -> Optional[gaussian_domination.Rate]:
  """The proved Gaussian domination of `mech`'s n-client secure sum: the
  two-level route (`gaussian_domination.rate`) where it applies, else the
  blanket mixture (module docstring) for the quantized Gaussian above two
  levels and the randomized projection above one bit, with the lattice.

  Args:
    mech: a `tff_quant.mechanisms.Mechanism`.
    num_clients: n >= 1.

  Returns:
    A `gaussian_domination.Rate` (a `MixtureRate` for the blanket mixture),
    or None (`unavailable` says why; the round's profile then comes from its
    RDP curve).

  Raises:
    ValueError: `num_clients` < 1.
  """
  n = validation.check_integer('num_clients', num_clients, 1)
  if not gaussian_domination.unavailable(mech, n):
    return gaussian_domination.rate(mech, n)
  if unavailable(mech, n):
    return None
  return _mixture_rate(type(mech), _key(mech), n)


def _key(mech) -> tuple:
  """The cache key of `mech`'s laws: its parameters."""
  return tuple(sorted(mech.params().items()))


@functools.lru_cache(maxsize=64)
def _blanket(kind, params):
  """(vertex log-laws, their error bound η, log R, its error bound, β) of
  the mechanism `kind(**params)`: R the common part of lower bounds on the
  exact vertex laws, β <= Σ of that minimum (certified); None where the
  minimum is 0 everywhere."""
  mech = kind(**dict(params))
  eta = numerics.law_error(mech)
  vertices = np.asarray(mech.lattice_log_pmfs(), np.float64)
  # Lower bounds on the exact vertex laws; their minimum m defines R = m/Σm
  # exactly, and every vertex law is >= (Σm)·R.
  low = _below(vertices, eta + 2 * _U * np.abs(vertices))
  low = np.where(np.isfinite(vertices), low, -np.inf)
  common = np.min(low, axis=0)
  finite = np.isfinite(common)
  if not np.any(finite):
    return None
  top = float(np.max(common[finite]))
  shifted = np.where(finite, common - top, -np.inf)
  v = shifted[finite]
  log_z, e_z = exact_laws.log_normaliser(v, _U * np.abs(v))
  log_sum = log_z + top
  e_sum = e_z + 2 * _U * abs(log_sum)
  log_r = np.where(finite, common - log_sum, -np.inf)
  span = np.flatnonzero(finite)
  log_r = log_r[span[0]:span[-1] + 1]   # a translation: no divergence moves
  e_r = (e_sum + 2 * _U * float(np.max(np.abs(log_r[np.isfinite(log_r)])))
         ) * (1 + 1e-6)
  beta = min(math.exp(log_sum - e_sum) * (1 - _LIB - 2 * _U), 1.0)
  return vertices, eta * (1 + 1e-6), log_r, e_r, beta


@functools.lru_cache(maxsize=64)
def _mixture_rate(kind, params, num_clients: int) -> Optional[MixtureRate]:
  """`rate` of the blanket mixture, cached by the mechanism's parameters."""
  mech = kind(**dict(params))
  blanket = _blanket(kind, params)
  if blanket is None:
    return None
  vertices, e_v, log_r, e_r, beta = blanket
  others = num_clients - 1
  counts = _counts(others, beta)
  frac = fractions.Fraction
  step = gaussian_domination._down(
      2 * frac(mech.input_bound) / (mech.lattice - 1))
  kappas = {}
  log_o, e_o = np.zeros(1), 0.0   # R^{*0}: the point mass at 0
  wanted = set(counts.tolist())
  for m in range(others + 1):
    if m in wanted:
      kappas[m] = _count_rate(log_o, e_o, vertices, e_v, float(step))
    if m < others:
      log_o, e_o = _log_convolve(log_r, e_r, log_o, e_o)
  # κ(R^{*m}) bounds every count above m (data processing), so each count
  # may take the least bound at or below it.
  kappa = np.minimum.accumulate(np.array([kappas[m] for m in counts.tolist()]))
  if not np.all(np.isfinite(kappa)):
    return None
  # P(g(M) = g): the binomial's mass on [g, next g), within its log errors.
  log_w, e_w = exact_laws.log_binomial(others, beta)
  with np.errstate(under='ignore'):
    w_low = np.exp(log_w - e_w) * (1 - _LIB)
    w_high = np.exp(log_w + e_w) * (1 + _LIB)
  edges = np.concatenate([counts, [others + 1]])
  weights_low = tuple(math.fsum(w_low[a:b]) * (1 - others * _U)
                      for a, b in zip(edges[:-1], edges[1:]))
  weights_high = tuple(math.fsum(w_high[a:b]) * (1 + others * _U)
                       for a, b in zip(edges[:-1], edges[1:]))
  squares = tuple(float(k * k * (1 + 3 * _U)) for k in kappa)
  reach = gaussian_domination.LATTICE_ULPS * _U * mech.input_bound
  slack = float(np.max(kappa)) * 2 * reach * (1 + 4 * _U)
  why = (f'{mech.name}: per-count Gaussian domination over the lattice cells '
         f'(κ = {kappa[-1]:.6g} with all {others} others in the blanket, '
         f'{kappa[0]:.6g} with none), mixed over the others\' blanket count '
         f'M ~ Binomial({others}, {beta:.6g}) (common part of the vertex '
         f'laws) and concentrated over coordinates (Chernoff, t = '
         f'{ROUND_TAIL:g} per round added to the profile); every rounding '
         'carried')
  return MixtureRate(float(kappa[-1]), why, slack=slack, tail=ROUND_TAIL,
                     clip=float(mech.input_bound),
                     counts=tuple(counts.tolist()), squares=squares,
                     weights_low=weights_low, weights_high=weights_high)
