"""Each paper's closed-form privacy claim, as printed, next to the exact values.

These are reported for comparison only; tff_quant never uses them to state a
guarantee. tests/accounting/bounds_test.py checks which are actual upper bounds
of the exact divergence of the mechanism as implemented:
* RQM Thm 5.2: an upper bound of the exact local D∞ (checked on a grid).
* QMGeo eq. (21): the sampler as written has D∞ = inf, so it bounds nothing there;
  for the full_support variant it equals the exact D∞ at p = 0.5 and is BELOW it
  for larger p (not a bound). Eq. (25) is negative for the paper's own settings
  (R, p) in {(8, .5), (8, .9), (16, .9)} at α = 2: not a bound.
* Quantized Gaussian (Thm 1 post-processing): α Cq²/(2σ²) bounds the exact D_α.
* RQP-SGD Thm 1's per-step ε_t: reported as printed (see rqp_epsilon_t).
* Distributed discrete Gaussian (KLS21, Prop. 14 / Thm 1) and Skellam (AKL21,
  Thm 3.5): closed-form RDP of the scalar sum at an integer shift; the exact
  values of `ddgauss` and `skellam` are below them (tested).
* BQ Lemma 1 / Remark 1: a (ε, δ)-style bound built on a De Moivre-Laplace
  approximation of the binomial mode; reported, not used.

References (KLS21, AKL21, papers 000-004): docs/references.md.
"""

import math
from typing import Tuple

from scipy import special, stats

from tff_quant.common import validation


def rqm_theorem_5_2(mech) -> float:
  """log(2(1-q)^2 (1 + c/Δ)) + m log(1/(1-q))  (paper 002, Thm 5.2).

  Args:
    mech: an `RQM` (its `q`, `clip` c, `delta` Δ and `num_levels` m).

  Returns:
    The paper's bound on the local ε∞ (D∞) of one coordinate, in nats.
  """
  q = mech.q
  return (math.log(2 * (1 - q)**2 * (1 + mech.clip / mech.delta)) +
          mech.num_levels * math.log(1 / (1 - q)))


def qmgeo_eq21(mech) -> float:
  """ε = -(ln p + (R-2) ln(1-p))  (paper 001, eq. 21).

  Args:
    mech: a `QMGeo` (its `p` and `num_levels` R).

  Returns:
    The paper's pure ε of one coordinate, in nats (not a bound on the
    sampler as written; module docstring).
  """
  return -(math.log(mech.p) + (mech.num_levels - 2) * math.log1p(-mech.p))


def qmgeo_eq25(mech, alpha: float) -> float:
  """ε(α) of QMGeo eq. (25) (paper 001), exactly as printed.

  Args:
    mech: a `QMGeo` (its `p` and `num_levels` R).
    alpha: the Rényi order α > 1.

  Returns:
    The printed ε(α) of one coordinate (can be negative: not a bound).
  """
  r, p, a = mech.num_levels, mech.p, alpha
  q = 1 - p
  log_v = (math.log(p) + (-2 * a + (1 - a) * r + 1) * math.log(q) -
           math.log1p(-q**(r - 1)) + math.log(a) +
           math.log((q**((2 * a - 1) * r) - 1) / (q**(2 * a - 1) - 1)))
  return log_v / (1 - a)


def qmgeo_eq27(mech, alpha: float, dim: int, kappa: float = 1.0) -> float:
  """Vector RDP of eq. (27) (paper 001): κ² d × eq. (25), as printed.

  Args:
    mech: a `QMGeo`.
    alpha: the Rényi order α > 1.
    dim: d, coordinates.
    kappa: κ, the sampling rate the paper scales by (1: none).

  Returns:
    The printed per-round ε(α) of the d-dimensional update.
  """
  return kappa**2 * dim * qmgeo_eq25(mech, alpha)


def gaussian_rdp(mech, alpha: float) -> float:
  """α Δ²/(2σ²) with Δ = Cq: the unquantized Gaussian's RDP (paper 000,
  Sec. III-B with its Thm 1, post-processing; Mironov 2017 for the Gaussian).

  Args:
    mech: a `QuantizedGaussian` (its `clip` Cq and `sigma` σ).
    alpha: the Rényi order α > 1.

  Returns:
    The Gaussian's RDP at α, which bounds the quantized Gaussian's exact D_α.
  """
  return alpha * mech.clip**2 / (2 * mech.sigma**2)


def ddgauss_vector_rdp(alpha: float, l2_sensitivity: float, local_std: float,
                       num_clients: int, dim: int) -> float:
  """KLS21 (Prop. 14 / Thm 1): RDP of the sum of n discrete Gaussians N_Z(0, σ²)^d
  at an integer shift of ℓ2 norm Δ2: α/2·(Δ2/(√n σ) + τ√d)², or α/2·Δ2²/(nσ²)
  plus the larger of τd and ατd/4 (Prop. 14's and Thm 1's forms of that term),
  τ = 10 Σ_{k=1}^{n-1} exp(-2π²σ² k/(k+1)) (negligible once σ >= 2).

  Args:
    alpha: the Rényi order α >= 1.
    l2_sensitivity: Δ2, the ℓ2 norm of the integer shift.
    local_std: σ > 0, each client's discrete Gaussian scale.
    num_clients: n >= 1, clients in the sum.
    dim: d, coordinates.

  Returns:
    The smaller of the two closed forms, in nats.
  """
  tau = 10 * sum(math.exp(-2 * math.pi**2 * local_std**2 * k / (k + 1))
                 for k in range(1, num_clients))
  scale = l2_sensitivity / (math.sqrt(num_clients) * local_std)
  return min(alpha / 2 * scale**2 + max(tau * dim, alpha * tau * dim / 4),
             alpha / 2 * (scale + tau * math.sqrt(dim))**2)


def ddgauss_rdp(alpha: float, mech, num_clients: int) -> float:
  """`ddgauss_vector_rdp` for one coordinate of `mech` moving end to end
  (integer shift Δ = 2r, d = 1; KLS21).

  Args:
    alpha: the Rényi order α >= 1.
    mech: a `DistributedDiscreteGaussian` (its `steps` r and `noise_std`).
    num_clients: n >= 1, clients in the sum.

  Returns:
    The closed-form RDP of the scalar sum, in nats.
  """
  return ddgauss_vector_rdp(alpha, 2 * mech.steps, mech.noise_std, num_clients, 1)


def skellam_vector_rdp(alpha: float, l2_sensitivity: float, l1_sensitivity: float,
                       local_std: float, num_clients: int) -> float:
  """AKL21 Thm 3.5: RDP of Skellam noise of variance μ = nσ² per coordinate at an
  integer shift with norms Δ2, Δ1: αΔ2²/(2μ) + min(((2α-1)Δ2² + 6Δ1)/(4μ²),
  3Δ1/(2μ)); integer α.

  Args:
    alpha: the Rényi order, an integer >= 2.
    l2_sensitivity: Δ2, the ℓ2 norm of the integer shift.
    l1_sensitivity: Δ1, its ℓ1 norm.
    local_std: σ > 0, each client's Skellam standard deviation.
    num_clients: n >= 1, clients in the sum.

  Returns:
    The closed-form RDP, in nats.
  """
  mu = num_clients * local_std**2
  return alpha * l2_sensitivity**2 / (2 * mu) + min(
      ((2 * alpha - 1) * l2_sensitivity**2 + 6 * l1_sensitivity) / (4 * mu**2),
      3 * l1_sensitivity / (2 * mu))


def skellam_rdp(alpha: float, mech, num_clients: int) -> float:
  """`skellam_vector_rdp` for one coordinate of `mech` moving end to end
  (Δ1 = Δ2 = 2r; AKL21).

  Args:
    alpha: the Rényi order, an integer >= 2.
    mech: a `DistributedSkellam` (its `steps` r and `noise_std`).
    num_clients: n >= 1, clients in the sum.

  Returns:
    The closed-form RDP of the scalar sum, in nats.
  """
  shift = 2 * mech.steps
  return skellam_vector_rdp(alpha, shift, shift, mech.noise_std, num_clients)


def binomial_mode_prob(m: int) -> float:
  """P_max = max_k C(m, k) / 2^m, exact (paper 003, Remark 1 approximates
  sqrt(2/(π m))).

  Args:
    m: the binomial's trials, an integer >= 0.

  Returns:
    The probability of Binomial(m, 1/2)'s mode, in (0, 1].
  """
  return float(stats.binom.pmf(m // 2, m, 0.5))


def bq_lemma_1(mech, dim: int, batch_size: int, dataset_size: int) -> float:
  """ε = 8 d s L P_max / |D| (paper 003, Lemma 1, with the exact P_max).

  Args:
    mech: a `BQ` (its levels `s` and binomial trials `m`).
    dim: d, coordinates.
    batch_size: L, examples per batch.
    dataset_size: |D|, examples in the dataset.

  Returns:
    The paper's ε per step (a De Moivre-Laplace-based figure; reported,
    not used).
  """
  return 8 * dim * mech.s * batch_size * binomial_mode_prob(mech.m) / dataset_size


def bq_variance(s: int, m: int) -> float:
  """Per-coordinate BQ noise variance in units of C²: (m/4 + 1/4)/s² (paper
  003, eq. 14, q = 1/2).

  Args:
    s: quantization levels per sign, >= 1.
    m: binomial trials, >= 0.

  Returns:
    The variance divided by C² (C the ℓ∞ clip).
  """
  return (m / 4 + 0.25) / s**2


def bq_parameters(bits: int, epsilon: float, dim: int, batch_size: int,
                  dataset_size: int) -> Tuple[int, int]:
  """(s, m) minimising the BQ variance s.t. log2(2s+m+1) <= b and Lemma 1's ε <= target.

  Exact integer search over paper 003's eqs. (16)-(18) instead of the closed
  forms (19)-(20), which drop the integrality of s and m.

  Args:
    bits: b, bits per coordinate, an integer >= 2 (2s + m + 1 <= 2^b).
    epsilon: the target ε of Lemma 1, > 0.
    dim: d, coordinates.
    batch_size: L, examples per batch.
    dataset_size: |D|, examples in the dataset.

  Returns:
    (s, m): the integers of least variance (`bq_variance`) meeting both.

  Raises:
    TypeError: `bits` not an integer or `epsilon` not a number.
    ValueError: `bits` < 2, `epsilon` <= 0, or no (s, m) within `bits`
      meets `epsilon`.
  """
  validation.check_integer('bits', bits, 2)
  validation.check_positive('epsilon', epsilon)
  best = None
  top = 2**bits - 1
  eps_at = lambda s, m: 8 * dim * s * batch_size * binomial_mode_prob(m) / dataset_size
  for s in range(1, top // 2 + 1):
    # P_max(m) is non-increasing in m: the smallest feasible m by bisection
    # (larger m only adds variance for this s).
    lo, hi = 0, top - 2 * s
    if eps_at(s, hi) > epsilon:
      continue
    while lo < hi:
      mid = (lo + hi) // 2
      lo, hi = (lo, mid) if eps_at(s, mid) <= epsilon else (mid + 1, hi)
    v = bq_variance(s, lo)
    if best is None or v < best[0]:
      best = (v, s, lo)
  if best is None:
    raise ValueError(f'No (s, m) with {bits} bits meets ε={epsilon} '
                     f'(d={dim}, L={batch_size}, |D|={dataset_size}).')
  return best[1], best[2]


def rqp_epsilon_t(mech, clip: float) -> float:
  """Per-step ε_t of RQP-SGD Thm 1 (paper 004), exactly as printed.

  log( [a (2Φ(a1/σ) - 1) + c0] / [a (Φ(a2/σ) - Φ(a3/σ)) + c0] ),
  a = (2^b q - 1)/(2^b - 1), c0 = (1-q)/(2^b - 1), a1 = M/(2^b-1),
  a2 = M + M/(2^b-1) + C, a3 = M - M/(2^b-1) + C, σ = σ_l (the mechanism's σ).

  Args:
    mech: a `RandomizedProjection` (its `bound` M, `num_levels` 2^b, `q` and
      `sigma` σ).
    clip: C, the per-example gradient clip the paper shifts by.

  Returns:
    The printed per-step ε_t, in nats (reported next to ours, not used).
  """
  big_l = mech.num_levels
  m_, s_ = mech.bound, mech.sigma
  a = (big_l * mech.q - 1) / (big_l - 1)
  c0 = (1 - mech.q) / (big_l - 1)
  a1 = m_ / (big_l - 1)
  a2 = m_ + m_ / (big_l - 1) + clip
  a3 = m_ - m_ / (big_l - 1) + clip
  num = a * (2 * special.ndtr(a1 / s_) - 1) + c0
  den = a * (special.ndtr(a2 / s_) - special.ndtr(a3 / s_)) + c0
  return math.log(num / den)


def rqp_paper_q(bound: float, bits: int, sigma: float, clip: float,
                epsilon_t: float) -> float:
  """Largest q with `rqp_epsilon_t` <= epsilon_t: how the paper picks q (Sec. 4).

  ε_t increases with q (a grows, c0 shrinks); bisection on [1/(2^b-1), 1)
  (paper 004, Thm 1 and Sec. 4).

  Args:
    bound: M, the projection's range bound.
    bits: b, bits per coordinate.
    sigma: σ, the Gaussian noise's standard deviation.
    clip: C, the per-example gradient clip.
    epsilon_t: the target per-step ε_t.

  Returns:
    q in [1/(2^b-1), 1 - 1e-12] (1 - 1e-12 where every q meets the target).

  Raises:
    ValueError: the target is below ε_t at the smallest q (raise σ), or an
      argument `RandomizedProjection` rejects.
  """
  from tff_quant import mechanisms  # pylint: disable=g-import-not-at-top
  eps_at = lambda q: rqp_epsilon_t(
      mechanisms.RandomizedProjection(bound, bits, q, sigma), clip)
  lo, hi = 1.0 / (2**bits - 1), 1.0 - 1e-12
  if eps_at(lo) > epsilon_t:
    raise ValueError(f'`epsilon_t`={epsilon_t} is below the paper ε_t at the '
                     f'smallest q={lo}: raise sigma.')
  if eps_at(hi) <= epsilon_t:
    return hi
  for _ in range(60):
    mid = 0.5 * (lo + hi)
    lo, hi = (mid, hi) if eps_at(mid) <= epsilon_t else (lo, mid)
  return lo
