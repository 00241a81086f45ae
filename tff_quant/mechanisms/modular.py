"""Distributed-DP mechanisms behind a modular secure sum: TFF's `DistributedDpSumFactory`, per coordinate.

A client scales x in [-c, c] to y = x·r/c in [-r, r] (γ = c/r is the rounding
granularity), rounds y stochastically to an integer j, adds integer noise Z
(symmetric, input-free) and sends (j + Z) mod M. The server sees only the sum
mod M (tff.aggregators.SecureModularSumFactory) and decodes γ·centre(sum mod M),
centre() mapping [0, M) to [-M/2, M/2); exact unless the true sum leaves that
range. Subclasses give the noise law (discrete Gaussian, Skellam).

Exact accounting without any assumption on the other clients: the sum of n
clients is (Σ j_i + Σ Z_i) mod M, and the law of Σ Z_i mod M (W_n) is
translation invariant on Z_M. The others' rounded inputs only shift it, so by
joint convexity of exp((α-1)D_α) their randomness cannot raise the divergence
above its worst shift, and the divergence between targets x, x' depends only on
x - x'. The target's law is affine in x between integers, so (as in
`accounting.secure_sum`) the sup over |x - x'| <= t sits at a vertex: integer
shifts j <= t/γ, or a shift of exactly t/γ (mixing ⌊t/γ⌋ and ⌈t/γ⌉), in either
order; W_n is symmetric, so the sign of the shift does not matter.
"""

import abc
import functools
import math

from typing import Optional, Tuple

import numpy as np
from scipy import special

from tff_quant.common import exact_laws
from tff_quant.common import laws
from tff_quant.common import validation
from tff_quant.mechanisms import base
from tff_quant.mechanisms import utility

tf = base.tf

# Noise window of the exact pmf: |z| <= WINDOW_MODULI·M covers the aliases of
# Z_M that matter (noise std <= M/8, so the next alias is e^-120 smaller).
WINDOW_MODULI = 2.5
# The sampler's table stops where both tails are below this (float64 uniforms
# cannot resolve smaller probabilities).
SAMPLER_TAIL = 1e-19
# Largest n·M for which the exact law of the n-client noise sum is computed by
# convolution (about 10 s); beyond, the call is refused before it starts.
MAX_SUM_SUPPORT = 2**23
# `_wrapped_above`: the integer noise sum is resolved down to FLOOR_MARGIN
# nats below the smallest residue's Gaussian estimate; unresolved aliases may
# add at most FLOOR_RELATIVE (relative) to any residue, or all is resolved.
FLOOR_MARGIN = 80.0
FLOOR_RELATIVE = 1e-15
# Largest -log of one client's smallest wrapped noise probability the tilted
# convolution is asked to resolve (tilts needed grow with it).
MAX_LOG_SPAN = 3e4


class UnresolvableError(ValueError):
  """The exact noise-sum law is out of reach at these parameters (checked first)."""


# Shifts x M entries evaluated at once (8 MiB). Blocks of 32 MiB sat at
# glibc's largest mmap threshold, so every one was mapped and faulted in
# afresh: 2.8x slower (docs/performance.md).
_SHIFT_BLOCK_ENTRIES = 2**20


def _shift_divergences(log_w: np.ndarray, top: int, orders, log_w_error=None):
  """{α: [top + 1] D_α(W || W shifted by j on Z_M)} for j = 0..top, in blocks of
  shifts (one row per shift), all orders from one gather.

  With `log_w_error` ([M] proved bounds δ on |log_w - log W|), upper bounds
  for the exact W: each value is raised by its own rounding (as
  `laws.renyi_divergence`'s: the terms' three roundings, the rows' exp,
  N·u and log) and by δ as `laws.renyi_divergence` carries it: for α > 1
  the power sum by log(1 + Σ_k s_k·expm1(αδ_k + (α-1)δ_(k-j))) (s_k the
  terms' shares, from a second row sum of the terms plus log expm1(gain),
  each within 1e-12 relative: covered by the 1% the ratio is raised by);
  KL with each term at its worst; D∞ entrywise. Without it, the values as
  computed (scipy's logsumexp bits)."""
  m = log_w.size
  if np.any(np.isnan(log_w)):
    # Unresolved entries (tails below what the sum could resolve): no bound on
    # them here, so this setting is out of reach (calibration skips it).
    raise UnresolvableError(
        f'The noise-sum law on Z_{m} has {int(np.sum(np.isnan(log_w)))} '
        'unresolved entries: raise noise_std or lower num_levels.')
  bounded = log_w_error is not None
  err = np.zeros(m) if not bounded else np.asarray(log_w_error, np.float64)
  if not np.all(np.isfinite(log_w)):
    return {a: np.asarray([laws.renyi_divergence(
        log_w, np.roll(log_w, j), a, log_p_error=err, log_q_error=np.roll(err, j))
                           for j in range(top + 1)]) for a in orders}
  out = {a: np.empty(top + 1) for a in orders}
  u, lib = laws.U, laws.LIB
  spread = float(np.max(np.abs(log_w)))
  abs_kl = np.zeros(top + 1)
  block = max(1, _SHIFT_BLOCK_ENTRIES // m)
  idx = np.arange(m)
  p_w = np.exp(log_w)
  for start in range(0, top + 1, block):
    js = np.arange(start, min(top + 1, start + block))
    gather = (idx[None, :] - js[:, None]) % m
    rolled = log_w[gather]   # row j: np.roll(log_w, j)
    diff = log_w[None, :] - rolled
    if bounded:
      err_sum = err[None, :] + err[gather]
    terms = np.empty_like(diff)
    for a in orders:
      if math.isinf(a):
        out[a][js] = (diff + err_sum if bounded else diff).max(axis=1)
      elif a == 1:
        if bounded:   # each term at its worst (`laws.renyi_divergence`)
          worst = diff + err_sum
          kl = p_w[None, :] * np.exp(np.where(worst >= 0, err[None, :],
                                              -err[None, :])) * worst
          out[a][js] = np.sum(kl, axis=1)
          abs_kl[js] = np.sum(np.abs(kl), axis=1)
        else:
          out[a][js] = np.sum(p_w[None, :] * diff, axis=1)
      else:   # log_w + (a - 1)·diff, summed in the log domain per row
        np.multiply(diff, a - 1, out=terms)
        terms += log_w[None, :]
        if bounded:
          with np.errstate(divide='ignore'):
            raised = terms + np.log(np.expm1(a * err[None, :] +
                                             (a - 1) * err[gather]))
          gained = laws.log_sum_exp_rows(raised)
        out[a][js] = laws.log_sum_exp_rows(terms) / (a - 1)
        if bounded:
          ratio = np.exp(gained - out[a][js] * (a - 1))
          out[a][js] += 1.01 * np.log1p(1.01 * ratio) / (a - 1)
  if bounded:
    for a, v in out.items():
      if math.isinf(a):
        v += 3 * u * np.abs(v)
      elif a == 1:
        v += 1.01 * ((m + 12) * u + 3 * lib) * abs_kl
      else:   # laws.renyi_divergence's allowance, T = (2α - 1)·max|log W|
        log_sum = v * (a - 1)
        v += 1.01 * (u * (5 * (2 * a - 1) * spread + m + 2 * np.abs(log_sum) + 4) +
                     lib * (4 + np.abs(log_sum))) / (a - 1)
  return {a: np.maximum(v, 0.0) for a, v in out.items()}


class ModularNoiseMechanism(base.Mechanism):
  """Stochastic rounding to c/r steps, integer noise, mod M (see the module docstring)."""

  piecewise_affine = True
  jit_encode = False
  TUNABLES = (
      base.levels_tunable(2**12, 'M (the modulus)'),
      base.Tunable('steps', 16, 1, 2**22, kind=int,
                   doc='r: the coordinate bound c maps to r integer steps',
                   grid=tuple(2**i for i in range(15))),
      base.Tunable('noise_fraction', 1 / 128, 0, 0.125, low_open=True,
                   more_private='higher',
                   doc='per-client noise std in integer units / M'),
  )
  CALIBRATED = ('steps', 'noise_fraction')

  def __init__(self, clip: float, num_levels: int, steps: int, noise_std: float):
    self.clip = float(validation.check_positive('clip', clip))
    self.m = self.tunable('num_levels').check(num_levels)
    self.steps = self.tunable('steps').check(steps)
    if 4 * self.steps >= self.m:
      raise ValueError(f'`steps` must be < num_levels/4 = {self.m / 4:g} (the '
                       f'rounded input range [-r, r] inside the modulus), got {steps}.')
    self.noise_std = float(validation.check_number('noise_std', noise_std, 0,
                                                   self.m / 8, low_open=True))
    self.gamma = self.clip / self.steps

  @classmethod
  def for_coordinate_bound(cls, c_inf, **params):
    p = cls.complete_params(params)
    return cls(c_inf, p['num_levels'], p['steps'],
               p['noise_fraction'] * p['num_levels'])

  def params(self):
    return dict(clip=self.clip, num_levels=self.m, steps=self.steps,
                noise_std=self.noise_std)

  @classmethod
  def gaussian_matched(cls, sigma, c_inf, params):
    """noise_fraction = σ·r/(c·M): the integer noise std whose value in input
    units (γ = c/r per step) is σ; None outside the tunable's range. The
    rounding adds under γ²/4 of variance, and a sum that wraps is more
    private, so the exact ε at the guess is near the Gaussian's (discrete
    Gaussian at 16 bits, r = 64: the noise it calibrates to is within 0.1%
    of the guess)."""
    m = params['num_levels']
    fraction = max(sigma * params['steps'] / c_inf,
                   cls.least_resolvable_noise(m)) / m
    spec = cls.tunable('noise_fraction')
    return fraction if spec.low < fraction <= spec.high else None

  @classmethod
  @functools.lru_cache(maxsize=None)
  def least_resolvable_noise(cls, num_levels: int) -> float:
    """The least noise std (integer units) whose n-client sum law
    `noise_sum_log_pmf` resolves at modulus M: one client's wrapped
    probabilities must span at most e^-MAX_LOG_SPAN (the span falls as
    the std grows); within 1e-9 relative, from above. Cached per class and M.

    Args:
      num_levels: M.

    Returns:
      The std.
    """
    span = lambda std: cls(1.0, num_levels, 1, std)._log_span()
    lo, hi = math.log(1e-3), math.log(num_levels / 8)
    if span(math.exp(lo)) <= MAX_LOG_SPAN:
      return 0.0
    while hi - lo > 1e-9:
      mid = 0.5 * (lo + hi)
      lo, hi = (lo, mid) if span(math.exp(mid)) <= MAX_LOG_SPAN else (mid, hi)
    return math.exp(hi)

  def _log_span(self) -> float:
    """-log of one client's smallest wrapped noise probability (what
    MAX_LOG_SPAN limits)."""
    return -float(np.min(self._wrapped_noise()))

  # --- the noise (subclasses) ------------------------------------------------
  @abc.abstractmethod
  def noise_log_pmf(self, z: np.ndarray) -> np.ndarray:
    """log P(Z = z) of one client's noise at integers z, exact (relative precision)."""

  def noise_log_pmf_error(self, z: np.ndarray) -> Optional[np.ndarray]:
    """[z.size] proved bounds on |noise_log_pmf(z) - log P(Z = z)| at
    integers |z| <= WINDOW_MODULI·M, or None (the default): not proved
    (then `log_pmf_error` is None too)."""
    del z
    return None

  def noise_log_tail(self, t: int) -> float:
    """log of an upper bound on P(|Z| > t) for one client's noise (integer
    t >= 0); subclasses that prove `noise_log_pmf_error` give it (the
    wrapped law's window leaves that mass out)."""
    raise NotImplementedError

  def wrapped_noise_error(self) -> Optional[float]:
    """η_w: a proved bound on |log w - log P(Z ≡ k mod M)| at every residue
    k, w the computed wrapped law one client's noise adds (`_wrapped_noise`),
    or None where the noise's log-pmf carries no proved bound.

    The window's entries within `noise_log_pmf_error`, wrapped by
    `wrap_with_error`; the aliases beyond the window (mass <=
    `noise_log_tail`(half)) raise a residue by at most that mass over its
    exact value (>= e^(min w - error)), in log by log1p of it. Cached.

    Returns:
      The bound, or None.
    """
    errors = self._wrapped_noise_errors()
    return None if errors is None else float(np.max(errors))

  def _wrapped_noise_errors(self) -> Optional[np.ndarray]:
    """[M] the per-residue bounds whose largest is `wrapped_noise_error`
    (None where the noise's log-pmf carries none); cached."""
    if '_wrapped_errors' not in self.__dict__:
      half = int(math.ceil(WINDOW_MODULI * self.m))
      z = np.arange(-half, half + 1)
      errors = self.noise_log_pmf_error(z)
      if errors is None:
        self.__dict__['_wrapped_errors'] = None
      else:
        w, err = wrap_with_error(self.noise_log_pmf(z), errors, -half, self.m)
        floor = float(np.min(w - err))
        aliases = math.exp(min(self.noise_log_tail(half) - floor, 0.0))
        self.__dict__['_wrapped_errors'] = err + 1.01 * math.log1p(aliases)
    return self.__dict__['_wrapped_errors']

  @property
  def log_pmf_error(self) -> Optional[float]:
    """η of `log_pmf(x)` (`base.Mechanism.log_pmf_error`): the wrapped
    noise's η_w (`wrapped_noise_error`), plus the two-point mixture over the
    rounding (`exact_laws.two_point_mixture_error`: log1p(-f) + w[k - j]
    and log f + w[k - j - 1], |terms| <= max|w|, gap <= max|w_k - w_(k-1)|;
    f = 0 or 1 leaves one side, w itself, exactly). The law is the one at
    the rounding fraction f as computed (`_rounding`: the sampler's). None
    where η_w is."""
    eta = self.wrapped_noise_error()
    if eta is None:
      return None
    w = self._wrapped_noise()
    return eta + exact_laws.two_point_mixture_error(
        float(np.max(np.abs(w))), float(np.max(np.abs(w - np.roll(w, 1)))),
        one_sided=False)

  def noise_sum_log_pmf(self, num_clients: int) -> np.ndarray:
    """W_n: log P(Σ of n clients' noise ≡ k mod M), k = 0..M-1.

    Default: convolution of n wrapped laws (`laws.sum_log_pmf_with_error`,
    full relative precision), refused above MAX_SUM_SUPPORT before it starts.
    """
    return self._noise_sum(num_clients)[0]

  def noise_sum_log_error(self, num_clients: int) -> np.ndarray:
    """[M] bounds on |`noise_sum_log_pmf(n)` - log W_n| (absolute, in log),
    W_n the exact law of the n clients' noise sum mod M: the tilted
    convolution's proved error (`laws.sum_log_pmf_with_error`), the
    wrapping's (`wrap_with_error`) and FLOOR_RELATIVE where the far tails
    were only bounded (`_wrapped_above`), against the sum of the wrapped law
    as computed; plus the one-client law's own error carried through the n
    factors (`sum_input_error`); at n = 1, the wrapped law's own per-residue
    bounds. Where those are None (not proved), against the sum of the
    computed law only (zeros at n = 1).

    Args:
      num_clients: n >= 1.

    Returns:
      The bounds, float64, >= 0.
    """
    error = self._noise_sum(num_clients)[1]
    own = self._wrapped_noise_errors()
    if own is None:
      return error
    if num_clients == 1:
      return np.asarray(own, np.float64)
    return error + sum_input_error(self._wrapped_noise(), own, num_clients,
                                   self.noise_sum_log_pmf(num_clients))

  def _noise_sum(self, num_clients: int):
    """(W_n, its proved error), cached per n."""
    if num_clients == 1:
      return self._wrapped_noise(), np.zeros(self.m)
    cache = self.__dict__.setdefault('_sum_cache', {})
    if num_clients not in cache:
      cache[num_clients] = self._noise_sum_by_convolution(num_clients)
    return cache[num_clients]

  def _noise_sum_by_convolution(self, num_clients: int):
    support = num_clients * self.m
    if support > MAX_SUM_SUPPORT:
      raise UnresolvableError(
          f'The exact noise sum of {num_clients} clients at num_levels={self.m} '
          f'has {support:.3g} points (limit {MAX_SUM_SUPPORT:.3g}, about 10 s): '
          'lower num_levels or clients_per_round.')
    span = self._log_span()
    if span > MAX_LOG_SPAN:
      raise UnresolvableError(
          f'The exact law of {num_clients} clients\' noise sum is not resolvable '
          f'at noise_std={self.noise_std:g} with num_levels={self.m}: one '
          f'client\'s probabilities span e^-{span:.3g} (limit e^-{MAX_LOG_SPAN:.0g}); '
          'raise noise_std or lower num_levels.')
    centred = np.roll(self._wrapped_noise(), self.m // 2)   # index i: z = i - M/2
    first = -num_clients * (self.m // 2)
    try:
      # First with the far tails left unresolved (their wrapped share is
      # below float64's resolution); all of it where that share is not.
      wrapped = self._wrapped_above(centred, num_clients, first, with_error=True)
      if wrapped is None:
        total, _, error = laws.sum_log_pmf_with_error([(centred, num_clients)])
        wrapped = wrap_with_error(total, error, first, self.m)
    except RuntimeError:
      raise UnresolvableError(
          f'The exact law of {num_clients} clients\' noise sum is not resolvable '
          f'at noise_std={self.noise_std:g} with num_levels={self.m} (tails span '
          'too many orders of magnitude): raise noise_std or lower num_levels.'
      ) from None
    return wrapped

  def _wrapped_above(self, centred: np.ndarray, num_clients: int, first: int,
                     with_error: bool = False):
    """W_n (with `with_error`, (W_n, its proved error), which includes
    FLOOR_RELATIVE: the exact residue is at most 1 + FLOOR_RELATIVE times
    the resolved part) with the integer sum's far tails unresolved, or None where their
    rigorous upper bounds could move some residue by more than
    FLOOR_RELATIVE (relative): then the whole sum must be resolved.

    The n-client integer sum spans n·M values, and resolving its far tails
    (e^-1000 and below) is most of the convolution's tilts; after wrapping
    they sit beside residues of e^-30 or more. The floor is set
    FLOOR_MARGIN nats below a Gaussian estimate of the smallest residue;
    each residue's unresolved aliases are then added as their Chernoff upper
    bounds (`laws.sum_log_pmf_above`) and must stay below FLOOR_RELATIVE of
    the resolved part, so the answer equals the fully resolved one to float
    precision."""
    sigma = math.sqrt(num_clients * max(self.noise_variance(), 1e-300))
    smallest = (-(self.m / 2)**2 / (2 * sigma**2) -
                math.log(math.sqrt(2 * math.pi) * sigma))
    total, upper, error = laws.sum_log_pmf_with_error(
        [(centred, num_clients)], smallest - FLOOR_MARGIN)
    unresolved = np.isnan(total)
    low, low_error = wrap_with_error(np.where(unresolved, -np.inf, total),
                                     np.where(unresolved, 0.0, error), first,
                                     self.m)
    extra = wrap(np.where(unresolved, upper, -np.inf), first, self.m)
    with np.errstate(invalid='ignore'):
      if not np.all(extra - low <= math.log(FLOOR_RELATIVE)):
        return None
    return (low, low_error + FLOOR_RELATIVE) if with_error else low

  def _wrapped_noise(self) -> np.ndarray:
    cached = self.__dict__.get('_wrapped')
    if cached is None:
      half = int(math.ceil(WINDOW_MODULI * self.m))
      z = np.arange(-half, half + 1)
      cached = wrap(self.noise_log_pmf(z), -half, self.m)
      self.__dict__['_wrapped'] = cached
    return cached

  def noise_variance(self) -> float:
    z = np.arange(-self.m // 2, self.m // 2)
    p = np.exp(np.roll(self._wrapped_noise(), self.m // 2))
    return float(np.dot(p, z.astype(np.float64)**2))

  # --- levels and the exact pmf ----------------------------------------------
  @property
  def num_levels(self):
    return self.m

  @property
  def modulus(self):
    return self.m

  @property
  def input_bound(self):
    return self.clip

  @property
  def level_offset(self):
    return 0.0

  @property
  def level_step(self):
    return self.gamma

  @property
  def levels(self):
    """γ·centre(i): the value level i stands for (i and i - M are one residue)."""
    i = np.arange(self.m)
    return self.gamma * np.where(i < self.m // 2, i, i - self.m).astype(np.float64)

  def critical_inputs(self):
    return self.gamma * np.arange(-self.steps, self.steps + 1, dtype=np.float64)

  def _rounding(self, x: float):
    """(j, f): stochastic rounding of x/γ gives j + 1 w.p. f, else j."""
    y = self.clip_input(x) / self.gamma
    j = min(math.floor(y), self.steps - 1)
    return j, y - j

  def log_pmf(self, x):
    j, f = self._rounding(x)
    w = self._wrapped_noise()
    with np.errstate(divide='ignore'):
      return np.logaddexp(math.log1p(-f) + np.roll(w, j) if f < 1 else -np.inf,
                          math.log(f) + np.roll(w, j + 1) if f > 0 else -np.inf)

  def worst_case_variance(self):
    """γ²(Var Z + 1/4): one client's noise plus rounding at a half-integer."""
    return self.gamma**2 * (self.noise_variance() + 0.25)

  def decoded_mean_mse(self, num_clients):
    """Worst mean squared error per coordinate of the decoded mean, wraparound
    included: exact for n clients sharing one input x, maximised over x at every
    integer and half-integer step (where the wrap and each client's rounding
    variance peak)."""
    n = validation.check_integer('num_clients', num_clients, 1)
    worst = 0.0
    for js, f in self._step_grid(self.steps, (0.0, 0.5, 1.0)):
      first, second, _ = self._sum_moments(n, js, f)
      y = js + f   # E[(γ·centre(S) - nγy)²] / n²
      err = second - 2 * n * y * first + (n * y)**2
      worst = max(worst, float(np.max(err)))
    return self.gamma**2 * worst / n**2

  def signal_utility(self, num_clients, signal_bound=None):
    """E_a (`utility`) of the decoded mean γ·centre(S mod M)/n, exact from
    the law of the modular sum, for n clients sharing x = γy, |x| <= a.

    Each client rounds y to J or J + 1 (f = y - J), so S = nJ + K + W, K ~
    Binomial(n, f) and W the noise sum mod M. With g_p(s) = E[centre((s + W)
    mod M)^p] (circular correlations, by FFT), E[centre(S)^p] = Σ_k
    P(K = k) g_p(nJ + k). The slope is exact: centre steps by 1 except from
    M//2 - 1 to -M//2 (1 - M), so g_1(s + 1) - g_1(s) = 1 - M·P(W ≡ M//2 - 1
    - s) and dE[D]/dx = Σ_k P(K' = k)(1 - M·P(W ≡ M//2 - 1 - nJ - k)), K' ~
    Binomial(n - 1, f): 1 without wrap, 0 when W is uniform. Evaluated at
    quarter steps of y in [-a/γ, a/γ] and both one-sided slopes at integers.
    """
    n = validation.check_integer('num_clients', num_clients, 1)
    a = utility.resolve_signal_bound(self, signal_bound)
    xs, slopes, variances = [], [], []
    for js, f in self._step_grid(a / self.gamma, (0.0, 0.25, 0.5, 0.75, 1.0)):
      first, second, slope = self._sum_moments(n, js, f)
      xs.append(self.gamma * (js + f))
      slopes.append(slope)
      variances.append(self.gamma**2 * np.maximum(second - first**2, 0.0) / n**2)
    return utility.worst_case(np.concatenate(xs), np.concatenate(slopes),
                              np.concatenate(variances), a, n)

  def decoded_moments(self, num_clients, x):
    """(E[D], Var[D], dE[D]/dx) of D = γ·centre(S mod M)/n for n clients
    sharing x, exact (`signal_utility` has the algebra); the slope is the
    right derivative where x/γ is an integer."""
    n = validation.check_integer('num_clients', num_clients, 1)
    j, f = self._rounding(x)
    first, second, slope = self._sum_moments(n, [j], f)
    return (float(self.gamma * first[0] / n),
            float(self.gamma**2 * max(second[0] - first[0]**2, 0.0) / n**2),
            float(slope[0]))

  def _step_grid(self, top, fractions):
    """[(J values, f)]: the rounded inputs y = J + f in [-top, top] at each
    fraction f (f = 1 at J and f = 0 at J + 1 are one y, approached from
    either side), and the two ends y = ±top, J <= steps - 1."""
    whole = np.arange(math.floor(-top), min(math.ceil(top), self.steps))
    groups = [(whole[(whole + f >= -top - 1e-12) & (whole + f <= top + 1e-12)], f)
              for f in fractions]
    for y in (-top, top):
      j = min(math.floor(y), self.steps - 1)
      groups.append((np.array([j]), y - j))
    return groups

  def _sum_moments(self, num_clients, js, f):
    """(E[centre(S)], E[centre(S)²], dE[D]/dx) for n clients sharing y = J +
    f, one entry per J in js (`signal_utility`'s docstring has the algebra)."""
    g1, g2, step_up = self._centre_tables(num_clients)
    n = num_clients
    return (self._binomial_average(g1, js, n, n, f),
            self._binomial_average(g2, js, n, n, f),
            self._binomial_average(step_up, js, n, n - 1, f))

  def _centre_tables(self, num_clients):
    """(g_1, g_2, g_1(s + 1) - g_1(s)) over s in Z_M for the n-client noise
    sum W: g_p(s) = E[centre((s + W) mod M)^p], by FFT; cached per n."""
    cache = self.__dict__.setdefault('_centre_cache', {})
    if num_clients not in cache:
      log_w = self.noise_sum_log_pmf(num_clients)
      if np.any(np.isnan(log_w)):
        raise UnresolvableError(
            f'The noise-sum law on Z_{self.m} has unresolved entries: raise '
            'noise_std or lower num_levels.')
      m = self.m
      w = np.exp(log_w)
      i = np.arange(m)
      centre = np.where(i < m // 2, i, i - m).astype(np.float64)
      conj_w = np.conj(np.fft.rfft(w))
      cache[num_clients] = (np.fft.irfft(conj_w * np.fft.rfft(centre), m),
                            np.fft.irfft(conj_w * np.fft.rfft(centre**2), m),
                            1.0 - m * w[(m // 2 - 1 - i) % m])
    return cache[num_clients]

  def _binomial_average(self, table, js, num_clients, trials, f):
    """[len(js)] Σ_k P(Binomial(trials, f) = k)·table[(n·J + k) mod M] for
    each J in js (n = num_clients; trials n to average over the rounding,
    n - 1 for the slope)."""
    from scipy import stats  # pylint: disable=g-import-not-at-top
    k = np.arange(trials + 1)
    pk = stats.binom.pmf(k, trials, f) if trials else np.ones(1)
    js = np.asarray(js, np.int64)
    out = np.empty(js.size)
    rows = max(1, _SHIFT_BLOCK_ENTRIES // k.size)
    for start in range(0, js.size, rows):
      block = js[start:start + rows]
      idx = (num_clients * block[:, None] + k[None, :]) % self.m
      out[start:start + rows] = table[idx] @ pk
    return out

  def modulus_needed(self, num_clients, signal_bound=None,
                     modclip_prob=utility.MODCLIP_PROB):
    """The least modulus TFF's DistributedDpSumFactory sizing admits for this
    noise and rounding and n clients' common signal |x| <= a (default the
    input bound): `utility.modulus_needed` in steps of γ. The summed noise
    fits when num_levels >= it."""
    a = utility.resolve_signal_bound(self, signal_bound)
    return utility.modulus_needed(self.noise_std, num_clients, a / self.gamma,
                                  modclip_prob)

  @property
  def divergence_breakpoint_step(self) -> float:
    """γ: between multiples of γ the target's law is affine in t (mixing two
    integer shifts), so exp((α-1)f_α) is convex there (a max of constants
    and of convex functions of the mixing weight: Σ P^α Q^(1-α) is jointly
    convex; for α = ∞, max P/Q of an affine P or Q)."""
    return self.gamma

  def sum_divergences(self, orders, num_clients, distances):
    """Exact, by translation invariance on Z_M (module docstring), raised
    by W_n's proved error (`noise_sum_log_error`) and the evaluation's own
    rounding (`_shift_divergences`, `laws.renyi_divergence`); with one
    client's law's η_w included where it is proved (ddgauss), else that law
    is taken as computed."""
    w = self.noise_sum_log_pmf(num_clients)
    delta = self.noise_sum_log_error(num_clients)
    u = np.asarray(distances, np.float64) / self.gamma
    top = int(math.ceil(u.max() - 1e-9))
    out = {}
    shifted = _shift_divergences(w, top, orders, delta)
    for a in orders:
      by_shift = np.maximum.accumulate(shifted[a])
      vals = []
      for ui in u:
        j = int(math.floor(ui + 1e-9))
        f = ui - j
        best = by_shift[min(j, top)]
        if f > 1e-9:
          mix = np.logaddexp(math.log1p(-f) + np.roll(w, j),
                             math.log(f) + np.roll(w, j + 1))
          # A mixture keeps its two entries' e^±δ, plus its own rounding.
          mix_error = np.maximum(np.roll(delta, j), np.roll(delta, j + 1)) + \
              exact_laws.two_point_mixture_error(
              float(np.max(np.abs(w))), float(np.max(np.abs(w - np.roll(w, 1)))),
              one_sided=False)
          best = max(best, laws.renyi_divergence(w, mix, a, log_p_error=delta,
                                                 log_q_error=mix_error),
                     laws.renyi_divergence(mix, w, a, log_p_error=mix_error,
                                           log_q_error=delta))
        vals.append(best)
      out[a] = np.asarray(vals)
    return out

  # --- sampling and decoding (TensorFlow) -------------------------------------
  def _noise_table(self):
    """(cdf as float64 [1, K], lowest value): inverse-CDF table of the noise."""
    cached = self.__dict__.get('_table')
    if cached is None:
      half = int(math.ceil(WINDOW_MODULI * self.m))
      z = np.arange(-half, half + 1)
      p = np.exp(self.noise_log_pmf(z))
      cdf = np.cumsum(p)
      lo = int(np.searchsorted(cdf, SAMPLER_TAIL))
      hi = int(np.searchsorted(cdf, 1.0 - SAMPLER_TAIL))
      hi = min(max(hi, 2 * half - lo), z.size - 1)   # symmetric noise
      table = cdf[lo:hi + 1] / cdf[hi]
      cached = (table[None, :], int(z[lo]))
      self.__dict__['_table'] = cached
    return cached

  def _encode(self, x, seed):
    """(j + Z) mod M: j the rounded x/γ, Z from the noise table.

    Inside the support: y = x/γ is `_rounding`'s (float64, the same
    operation on the float64 input `sanitize` clipped, up to the compiler's
    roundings), rounded within [-r, r] (`base.round_within`, which snaps):
    the shift j is one the pmf mixes, j = ±r alone at x = ±c. At
    c = 0.0331, r = 128 the float32 clip let j = r + 1 (5.9e-6 of the draws
    at float32(c)), a shift no input in range gives.
    """
    s_round, s_noise = tf.unstack(base.split_seed(seed, 2))
    y = tf.cast(x, tf.float64) / self.gamma
    j = tf.cast(base.round_within(y, -self.steps, self.steps, s_round), tf.int64)
    table, lowest = self._noise_table()
    u = base.uniform(tf.stack([1, tf.size(x)]), s_noise, tf.float64)
    idx = tf.searchsorted(tf.constant(table), u, side='right', out_type=tf.int64)
    idx = tf.minimum(idx, table.shape[1] - 1)
    noise = tf.reshape(idx, tf.shape(x)) + lowest
    return tf.math.floormod(j + noise, self.m)

  def decode(self, level_sum, num_clients):
    """γ·centre(sum mod M): the sum of the clients' inputs plus the noise."""
    del num_clients
    s = tf.math.floormod(tf.cast(level_sum, tf.int64), self.m)
    s = tf.where(s >= self.m // 2, s - self.m, s)
    return self.gamma * tf.cast(s, tf.float32)


def sum_input_error(log_w: np.ndarray, errors: np.ndarray, num_clients: int,
                    log_sum: np.ndarray) -> np.ndarray:
  """Bounds on |log W̃_n - log W_n|, W̃_n the n-fold circular convolution of
  a law w̃ whose entries are within `errors` of exact (log), W_n that of the
  exact w, at each residue of the computed sum `log_sum` (log W̃_n up to
  its own proved error, far below 1).

  With e_r <= A + B·|log w̃_r| at every residue (any B >= 0 and A = max_r
  (e_r - B·|log w̃_r|); B is picked among quantiles of the slopes from the
  mode for the least nA + (n-1)B·log M) and every w̃_r <= 1, each term Π_i w(r_i) of W_n(k) is
  within e^(±nA) (Π w̃(r_i))^(1∓B) of that of W̃_n(k); over its N <=
  M^(n-1) terms, Σ t^(1-B) <= N^B (Σ t)^(1-B) and Σ t^(1+B) >= N^-B (Σ
  t)^(1+B) (Jensen; power means), so |log W_n(k) - log W̃_n(k)| <= nA +
  (n-1)B·log M + B·|log W̃_n(k)|, with |log W̃_n(k)| <= |log_sum| + 1. A law
  with an entry above 1 takes B = 0 (n·max e_r). Raised by 1e-9 relative.

  Args:
    log_w: [M] the one-client law w̃ (log).
    errors: [M] bounds >= 0 on its entries' log error (0 at -inf entries).
    num_clients: n >= 1.
    log_sum: [M] the n-fold sum's law as computed (log).

  Returns:
    [M] the bounds, float64.
  """
  log_w = np.asarray(log_w, np.float64)
  finite = np.isfinite(log_w)
  mag = np.where(finite, np.abs(log_w), 0.0)
  errors = np.where(finite, np.asarray(errors, np.float64), 0.0)
  n, log_m = num_clients, math.log(log_w.size)
  slopes = [0.0]
  if np.all(log_w[finite] <= 0):   # candidates: the slopes from the mode
    at = int(np.argmin(np.where(finite, mag, np.inf)))
    rise = mag - mag[at]
    ok = finite & (rise > 0)
    from_mode = np.maximum((errors[ok] - errors[at]) / rise[ok], 0.0)
    if from_mode.size:
      slopes += np.quantile(from_mode, np.linspace(0, 1, 33)).tolist()
  best = None
  for b in slopes:
    a = max(0.0, float(np.max(errors - b * mag)))
    cost = n * a + (n - 1) * b * log_m
    if best is None or cost < best[0]:
      best = (cost, a, b)
  _, a, b = best
  value = np.where(np.isfinite(log_sum), np.abs(log_sum), 0.0) + 1.0
  return (n * a + (n - 1) * b * log_m + b * value) * (1 + 1e-9)


def wrap(log_p: np.ndarray, first_value: int, modulus: int) -> np.ndarray:
  """log P(V ≡ k mod M), k = 0..M-1, from log P(V = first_value + i), i = 0, 1, ..."""
  return _fold(log_p, first_value, modulus, -np.inf)[0]


def _fold(values: np.ndarray, first_value: int, modulus: int, fill):
  """(logsumexp over the rows, the rows) of `values` laid out from
  first_value mod M in rows of M, padded with `fill`."""
  start = first_value % modulus
  rows = -(-(start + values.size) // modulus)
  padded = np.full(rows * modulus, fill)
  padded[start:start + values.size] = values
  padded = padded.reshape(rows, modulus)
  with np.errstate(divide='ignore'):
    return special.logsumexp(padded, axis=0), padded


def wrap_with_error(log_p: np.ndarray, log_error: np.ndarray, first_value: int,
                    modulus: int) -> Tuple[np.ndarray, np.ndarray]:
  """`wrap`, with a proved bound on each residue's error.

  A residue is log Σ_i e^(x_i) over its R aliases, each within δ_i of
  exact. It moves by at most log Σ_i s_i·e^(δ_i) (s_i the aliases' shares;
  downwards by at most -log Σ s_i e^(-δ_i), which is smaller by Jensen's
  inequality), computed as logsumexp(x + δ) - logsumexp(x); each of the two
  logsumexps (scipy's: max, shift, exp, sum, log, add back) rounds by at
  most u·Σ_i s_i·|x_i - top| + lib + R·u + lib·log R + u·|result| (u =
  2^-53, lib = ELEMENTARY_ULPS relative: docs/privacy.md, "Numerics"): a
  shifted term's rounding u·|x_i - top| counts by its share s_i <=
  e^-|x_i - top| (the sum is >= 1), so by at most u·min(max|x_i - top|,
  R/e); and the difference by u of its value.

  Args:
    log_p: log P(V = first_value + i), i = 0, 1, ... (-inf allowed).
    log_error: [log_p.size] bounds on |log_p - exact| (0 at -inf entries).
    first_value: the value at index 0.
    modulus: M.

  Returns:
    (wrapped, error), two [M] float64 arrays.
  """
  wrapped, rows = _fold(log_p, first_value, modulus, -np.inf)
  errors = _fold(np.asarray(log_error, np.float64), first_value, modulus, 0.0)[1]
  with np.errstate(divide='ignore', invalid='ignore'):
    raised = special.logsumexp(rows + errors, axis=0)
    top = np.max(rows, axis=0)
    spread = np.minimum(
        np.max(np.where(np.isfinite(rows), np.abs(rows - top), 0.0), axis=0),
        rows.shape[0] / math.e)
    gap = np.where(np.isfinite(wrapped), raised - wrapped, 0.0)
  count = rows.shape[0]
  rounding = 1.01 * (laws.U * (spread + np.max(errors, axis=0) + count +
                               np.abs(np.nan_to_num(raised, neginf=0.0))) +
                     laws.LIB * (1 + math.log(count)))
  return wrapped, np.where(np.isfinite(wrapped),
                           gap * (1 + 2 * laws.U) + 2 * rounding, 0.0)
