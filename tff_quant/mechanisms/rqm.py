"""Randomized Quantization Mechanism (RQM), Youn et al., Alg. 2 (paper 002).

Levels B(i) = -X + 2iX/(m-1), X = c + Delta. Interior levels are kept independently
with probability q (endpoints always); x is randomly rounded between the nearest kept
level below and above it.

Departures from the paper, each derived from the sampler and checked by Monte Carlo
(tests/mechanisms/rqm_test.py):
* Sampling is O(d): the nearest kept level below x is j - G and above it j+1+G',
  G, G' ~ Geometric(q) independent, clamped at the (always kept) endpoints. This has
  exactly the law of Alg. 2's keep/drop masks without drawing m masks per coordinate.
* `log_pmf` is computed from the same two independent laws (lower kept level, upper
  kept level) and their rounding weights, in log space; it agrees with Lemma 5.1.
  Lemma 5.1's inner sums are truncated Lerch sums; a backward recurrence over the
  distance to the other side evaluates them for all levels in O(m) (eq. 5.1 as
  written is O(m^2)).
* Thm 5.2's bound is reported separately (accounting.bounds.rqm_theorem_5_2); the
  exact D-infinity is computed from this pmf.
"""

import math

import numpy as np
from scipy import signal

from tff_quant.common import exact_laws
from tff_quant.common import validation
from tff_quant.mechanisms import base

tf = base.tf

#: Largest interior gap K for which `_log_rounding_sums` sums C(a) term by
#: term (O(K·n)); above it, C's recurrence loses at most κ = 2(K+1+n)/K <
#: 2m/(DIRECT_MAX_GAP + 1) to its drive's subtraction.
DIRECT_MAX_GAP = 32


class RQM(base.SymmetricLevels, base.Mechanism):
  """RQM(clip=c, delta=Δ, num_levels=m, q=q)."""

  name = 'rqm'
  unbiased = True
  piecewise_affine = True   # rounding between kept levels is affine in x
  TUNABLES = (
      base.levels_tunable(16, 'm'),
      base.Tunable('q', 0.42, 0, 1, low_open=True, high_open=True,
                   more_private='lower', doc='keep probability of inner levels'),
      base.Tunable('delta_ratio', 1.0, 0, None, low_open=True,
                   more_private='higher', doc='Δ / c∞ (levels span ±(c∞ + Δ))',
                   # Up to 2048: RQM's noise scales with Δ, and at d = 1.2M
                   # over 2,000 rounds ε = 10 needs Δ = 128-256c.
                   grid=tuple(2.0**i for i in range(-2, 12))),
  )
  CALIBRATED = ('delta_ratio', 'q')

  def __init__(self, clip: float, delta: float, num_levels: int, q: float):
    self.clip = float(validation.check_positive('clip', clip))
    self.delta = float(validation.check_positive('delta', delta))
    self.m = self.tunable('num_levels').check(num_levels)
    self.q = float(self.tunable('q').check(q))
    self.x_max = self.clip + self.delta

  @classmethod
  def calibrated_at(cls, params):
    """At two levels there is no interior level to keep or drop, so q does
    not enter the law: Δ alone is searched, by bisection rather than over
    its grid (the law is PBM's at θ = c/(2(c + Δ)))."""
    if params.get('num_levels') == 2:
      return ('delta_ratio',)
    return cls.CALIBRATED

  #: The keep probability of the profile route's further search
  #: (`profile_searches`): one interior level in 10,000 dropped.
  KEEP_ALL_Q = 0.9999

  @classmethod
  def profile_searches(cls, params):
    """With [−c, c] inside its central bin RQM is one PBM trial at θ = c/h
    before its dropped levels' noise, which the Gaussian domination does
    not count (`accounting.gaussian_domination`): with nearly every level
    kept (q = KEEP_ALL_Q), Δ is bisected, not scanned over its powers of 2.
    Skipped where the caller fixed q or Δ, at two levels (where Δ alone is
    searched already: `calibrated_at`) and at an odd number (a level at 0:
    no central bin holds [−c, c])."""
    if ('q' in params or 'delta_ratio' in params or
        params.get('num_levels', 2) == 2 or params.get('num_levels', 2) % 2):
      return ()
    return ((('delta_ratio',), {'q': cls.KEEP_ALL_Q}),)

  @classmethod
  def for_coordinate_bound(cls, c_inf, **params):
    p = cls.complete_params(params)
    return cls(c_inf, p['delta_ratio'] * c_inf, p['num_levels'], p['q'])

  def params(self):
    return dict(clip=self.clip, delta=self.delta, num_levels=self.m, q=self.q)

  @property
  def num_levels(self):
    return self.m

  @property
  def input_bound(self):
    return self.clip

  @property
  def level_range(self):
    """The levels span [-x_max, x_max] (`base.SymmetricLevels`)."""
    return self.x_max

  def _bin(self, x: float) -> int:
    """j with x in [B(j), B(j+1)), j in [0, m-2]."""
    j = math.floor((x + self.x_max) / self.level_step)
    return min(max(j, 0), self.m - 2)

  def log_pmf(self, x):
    """log P(Q(x) = i), i = 0..m-1: Lemma 5.1 (eq. 5.1) of paper 002, in O(m).

    With h the level step, x in [B(j), B(j+1)), L = j - G the nearest kept level
    below x and U = j + 1 + G' the nearest above (G, G' independent, `_encode`):
      P(Q(x) = i) = P(L = i) · E[(B(U) - x) / (B(U) - B(i))],    i <= j,
      P(Q(x) = u) = P(U = u) · E[(x - B(L)) / (B(u) - B(L))],    u >= j + 1.
    Each expectation is a truncated Lerch-type sum E[(G + s)/(G + a)] over the
    other side's gap G, with a = j + 1 - i (resp. u - j) and s = (B(j+1) - x)/h
    (resp. (x - B(j))/h); `_log_rounding_sums` evaluates it for every a at once.

    Args:
      x: the input; clipped to [-c, c] (`clip_input`).

    Returns:
      np.ndarray [m]: log P(Q(x) = i), float64, finite for every i (entries
      below 1e-308 stay exact in log space).
    """
    x = self.clip_input(x)
    m, q = self.m, self.q
    b = self.levels
    h = self.level_step
    j = self._bin(x)
    lq, l1q = math.log(q), math.log1p(-q)
    s_low = min(max((x - b[j]) / h, 0.0), 1.0)       # (x - B(j)) / h
    s_up = min(max((b[j + 1] - x) / h, 0.0), 1.0)    # (B(j+1) - x) / h
    out = np.empty(m)
    # Lower side i = j - g, g = 0..j: P(L = i) = q(1-q)^g, (1-q)^j at i = 0;
    # the upper gap G' has its interior at k <= m - 3 - j, its endpoint at m - 2 - j.
    g = np.arange(j + 1)
    log_low = lq + g * l1q
    log_low[j] = j * l1q
    out[j::-1] = log_low + _log_rounding_sums(q, m - 3 - j, s_up, j + 1)
    # Upper side u = j + 1 + g: P(U = u) = q(1-q)^g, (1-q)^(m-2-j) at u = m - 1;
    # the lower gap G has its interior at k <= j - 1, its endpoint at j.
    g = np.arange(m - 1 - j)
    log_up = lq + g * l1q
    log_up[-1] = (m - 2 - j) * l1q
    out[j + 1:] = log_up + _log_rounding_sums(q, j - 1, s_low, m - 1 - j)
    return out

  @property
  def log_pmf_error(self) -> float:
    """η: a proved bound on |computed - exact| of `log_pmf` at every input
    (`exact_laws`' model: lib = ELEMENTARY_ULPS·2u for exp, log, log1p,
    expm1). Cached.

    Every input reads, on each side, `_log_rounding_sums`(q, K, s, n) with
    n = m - 2 - K, K = -1..m-3 (j in [0, m-2]); its s·A + C is within
    `_rounding_sums_error`(q, K, m) (relative) for every s in [0, 1], so the
    largest over K covers every input (K >= 1: s·A + C >= r/m). Where K
    is 0 or -1 the sum is s/a, whose log may reach 745.2 + log m in size
    (s a positive float); it carries (lib + 3u) of that. The rest each carry
    (lib + u)·|value| (log1p(-q), log q, k·log1p(-q), the additions, the
    endpoint term), every value within Λ = |log q| + (m+1)|log(1-q)| +
    2 log m + 2 in size; the logaddexp `exact_laws.log_add_error`(Λ). The
    inputs' errors pass through logaddexp weighted by their shares (at most
    the larger).
    """
    cached = self.__dict__.get('_log_pmf_error')
    if cached is None:
      u = exact_laws.U
      lib = 2 * exact_laws.ELEMENTARY_ULPS * u
      m, q = self.m, self.q
      lq, l1q = abs(math.log(q)), abs(math.log1p(-q))
      big_l = (lq + (m + 1) * l1q + 2 * math.log(m) + 2) * (1 + 1e-9)
      rel = float(np.max(_rounding_sums_error(q, np.arange(1, m - 2), m),
                         initial=0.0))
      rel = max(rel, 1.01 * u)                       # K = 0: s/a
      inner = -math.log1p(-rel) * (1 + 1e-9)
      # log q + log(s·A + C); the endpoint term (K+1)·log1p(-q) + log of a
      # ratio (2 roundings); log P(L = i) = log q + g·log1p(-q); the sums.
      logs = 8 * (lib + u) * big_l + 3 * lib * math.log(m) + 4 * u
      # K = 0 or -1: s/a itself, |log(s/a)| <= 745.2 + log m (s a float):
      # its log, the two additions and logaddexp's.
      small_s = (lib + 3 * u) * (exact_laws.LOG_FLOAT_MAX + math.log(m))
      cached = (inner + logs + small_s +
                exact_laws.log_add_error(big_l + exact_laws.LOG_FLOAT_MAX)) * (1 + 1e-6)
      self.__dict__['_log_pmf_error'] = cached
    return cached

  def _encode(self, x, seed):
    """Rounds x between the nearest kept levels below and above it.

    Inside the support: low = max(j - G, 0) and up = min(j + 1 + G', m - 1)
    with j clamped to [0, m - 2], and the level is low or up: in [0, m - 1]
    for every input (the pmf gives every level positive mass). t = (x + X)/h
    is `_bin`'s (float64, on the float64 input `sanitize` clipped), so the
    law at x >= c is the pmf's at c (at Δ = 1e-7c, 2^16 levels, the float32
    input float32(c) > c gave the top level 0.99727 against the pmf's
    0.99773 at c); the gaps are float64 geometrics (a float32 uniform cut
    them at log(2^-23)/log(1 - q): 29 levels at q = 0.42).
    """
    s_low, s_up, s_round = tf.unstack(base.split_seed(seed, 3))
    x = tf.cast(x, tf.float64)
    shape = tf.shape(x)
    step = self.level_step
    t = (x + self.x_max) / step
    j = tf.clip_by_value(tf.floor(t), 0.0, self.m - 2.0)
    gap = lambda s: base.geometric(shape, s, self.q, tf.float64)
    low = tf.maximum(j - gap(s_low), 0.0)
    up = tf.minimum(j + 1.0 + gap(s_up), self.m - 1.0)
    p_up = (t - low) / (up - low)
    go_up = base.uniform(shape, s_round, tf.float64) < p_up
    return tf.where(go_up, up, low)


def _log_rounding_sums(q: float, last: int, s: float, n: int) -> np.ndarray:
  """log S(a), a = 1..n: the rounding weight of one side of RQM, in O(n + last).

  S(a) = E[(G + s) / (G + a)] for the gap G of the kept level on the other side
  of x: P(G = k) = q(1-q)^k for k = 0..K (K = `last`; kept interior levels) and
  P(G = K+1) = (1-q)^(K+1) (the always-kept endpoint); see `RQM.log_pmf`. With
  r = 1 - q, A(a) = Σ_{k=0..K} r^k/(k + a) and C(a) = Σ_{k=0..K} r^k k/(k + a)
  (truncated Lerch sums), S(a) = q(s·A(a) + C(a)) + r^(K+1)(K+1+s)/(K+1+a):
  s·A + C adds positive terms for every s. Shifting k by one gives the
  backward recurrences (a = n down to 1), both y(a) = g(a) + r·y(a+1):
    A: g = 1/a - r^(K+1)/(K+1+a) = (K+1 + a(1 - r^(K+1)))/(a(K+1+a)),
       positive terms (1 - r^(K+1) by expm1);
    C: g = r·A(a+1) - (K+1)r^(K+1)/(K+1+a) = Σ_{j=1..K+1} (r^j/(j+a) -
       r^(K+1)/(K+1+a)) >= r·A(a+1)·K/(2(K+1+a)) (Chebyshev's sum
       inequality), so its subtraction loses at most κ = 2(K+1+a)/K;
  started from A(n), C(n) summed directly. For K <= DIRECT_MAX_GAP, C(a) is
  summed term by term instead (K positive terms). Positive recurrences carry
  relative errors additively (`_rounding_sums_error`). Writing C = Σ r^k -
  a·A instead would cancel catastrophically for a ≫ K. For K = 0, s·A + C =
  s/a exactly. Only r^k may underflow, where it is negligible in A and C,
  and in the endpoint term, which stays in log space.

  Args:
    q: the keep probability, in (0, 1).
    last: K, the largest interior gap; -1 when the endpoint is the only level
      on that side (then G = 0).
    s: the distance, in level steps, from x to the level next to it on the side
      of G's origin, in [0, 1].
    n: the number of values of a.

  Returns:
    np.ndarray [n]: log S(1), ..., log S(n) (-inf where S is 0: s = 0 and
    no interior level).
  """
  a = np.arange(1, n + 1, dtype=np.float64)
  big_k = last
  l1q = math.log1p(-q)
  with np.errstate(divide='ignore'):
    log_end = (big_k + 1) * l1q + np.log((big_k + 1 + s) / (big_k + 1 + a))
  if big_k < 0:
    return log_end
  if big_k == 0:
    inner = s / a
  else:
    r = 1.0 - q
    k = np.arange(big_k + 1, dtype=np.float64)
    r_k = np.exp(k * l1q)
    r_end = r_k[-1] * r                                   # r^(K+1), may be 0
    not_end = -math.expm1((big_k + 1) * l1q)              # 1 - r^(K+1)
    a_start = float(np.sum(r_k / (k + n)))
    c_start = float(np.sum(r_k * k / (k + n)))
    down = a[::-1][1:]                                    # n-1, ..., 1
    drive_a = np.concatenate([[a_start], (big_k + 1 + down * not_end) /
                              (down * (big_k + 1 + down))])
    sums_a = signal.lfilter([1.0], [1.0, -r], drive_a)     # A(n), ..., A(1)
    if big_k <= DIRECT_MAX_GAP:   # C(a) term by term: κ would be large
      sums_c = (r_k[None, 1:] * k[None, 1:] /
                (k[None, 1:] + a[::-1, None])).sum(axis=1)
    else:
      drive_c = np.concatenate([[c_start], r * sums_a[:-1] -
                                (big_k + 1) * r_end / (big_k + 1 + down)])
      sums_c = signal.lfilter([1.0], [1.0, -r], drive_c)   # C(n), ..., C(1)
    inner = (s * sums_a + sums_c)[::-1]                   # s·A(a) + C(a)
  with np.errstate(divide='ignore'):
    return np.logaddexp(math.log(q) + np.log(inner), log_end)


def _rounding_sums_error(q: float, last, num_levels: int) -> np.ndarray:
  """A bound on the relative error of `_log_rounding_sums`' s·A(a) + C(a),
  a = 1..n (n = m - 2 - K), for every s in [0, 1], K = `last` >= 1.

  r^k = exp(k·log1p(-q)): δ_r = expm1(K|log(1-q)|(lib + u)(1.0001) +
  1.0001·lib). A(n), C(n): K + 1 positive terms, each rounded twice or
  thrice, summed in any order (γ = 1.01(K+1)u, Higham 2002 eq. 4.4). The
  drive of A: 1 - r^(K+1) by expm1 of a rounded argument (|x|e^x/(1-e^x)
  <= 1 for x < 0, so lib + u + lib), then three roundings (a(K+1+a) is an
  exact integer). A positive recurrence y = g + r̃·y (r̃ = 1 - q rounded:
  u; two roundings) passes its drive's and start's relative errors through
  as a weighted mean (y(a) = Σ r^(a'-a) g(a')) and adds 3.01u per step,
  damped by r per step: rel A <= δ_r + γ + 2lib + 7u + 3.01u·min(n, 1/q).
  C's
  drive r̃·Ã(a+1) - (K+1)r̃^(K+1)/(K+1+a): each part within relA + 2.01u
  resp. δ_r + 6.02u of exact, each at most κ = 2(K+1+n)/K times the drive
  (`_log_rounding_sums`), plus the subtraction's u; C then adds its start's
  δ_r + γ + 2u and 3.01u·n. s·A + C: two more roundings of positive terms.

  Args:
    q: the keep probability, in (0, 1).
    last: K >= 1, or an array of them.
    num_levels: m.

  Returns:
    The bounds (relative), one per K.
  """
  u = exact_laws.U
  lib = 2 * exact_laws.ELEMENTARY_ULPS * u
  last = np.asarray(last, np.float64)
  n = num_levels - 2 - last
  l1q = abs(math.log1p(-q)) * (1 + 1e-9)
  d_r = np.expm1(last * l1q * 1.0001 * (lib + u) + 1.0001 * lib)
  gamma = 1.01 * (last + 1) * u
  # Step a' injects <= 3.01u of y(a'); it reaches y(a) times r^(a'-a)·
  # y(a')/y(a) <= r^(a'-a) (A and C decrease in a): Σ <= min(n, 1/q).
  steps = 3.01 * u * np.minimum(n, 1.0 / q) * (1 + 4 * u * n)
  rel_a = d_r + gamma + 2 * lib + 7 * u + steps
  kappa = 2.0 * (last + 1 + n) / last
  rel_drive = kappa * (rel_a + 2.01 * u + d_r + 6.02 * u) + 1.01 * u
  rel_c = np.where(last <= DIRECT_MAX_GAP,   # K terms r^k·k/(k+a), 3 roundings
                   d_r + gamma + 3.01 * u,
                   rel_drive + d_r + gamma + 2 * u + steps)
  # + 1e-290: terms r^k/(k+a) in the subnormals (exp's relative bound may
  # fail there) are each < 2.3e-308, against sums >= r/m >= 1e-24.
  return (np.maximum(rel_a, rel_c) + 2.01 * u) * (1 + 1e-9) + 1e-290
