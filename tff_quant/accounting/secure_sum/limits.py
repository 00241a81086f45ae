"""The limits of the secure-sum search, passed in (never patched).

Every cost and size limit the ℓ2 route's search reads is a field of one
frozen `Limits`; `divergence_curve`, `vector_rdp` and the cost estimates take
one (`DEFAULT_LIMITS` when not given) and hand it down. Over a cost limit an
evaluation is refused before it starts (`CostError`) or takes a looser bound
that is still proved (a sub-sum, or one client's local bound: `cost`).
"""

import dataclasses


@dataclasses.dataclass(frozen=True)
class Limits:
  """The cost limits and route thresholds of the target-pair search.

  Attributes:
    max_operations: evaluations estimated (`cost.search_operations`) above
      this many elementary log-domain operations (~1 minute of numpy on one
      core) are refused before anything is allocated, or take a sub-sum or
      the local bound (`cost.clients_searched`).
    max_bytes: target pairs whose arrays would take more than this many
      bytes (their weights, basis and envelopes, then the upper and lower
      rows and a temporary of that size) are refused before allocating
      (`targets.target_pairs`; BQ at 16 bits: 73 rows of 6.6e6 levels, 3.6
      GB each, killed the process for memory; QMGeo at 4,096 levels asked
      for a 4.47 GiB weight matrix before the count).
    pairwise_inputs: critical inputs whose distances are taken pairwise;
      above it they must be a lattice (`targets.breakpoints`).
    fft_levels: from this many levels on, a target row is convolved with the
      others by the tilted FFT sum (`divergence.sum_log_pmf`) rather than L
      shifted log-domain adds (`convolution.with_sum`; where the error is
      carried, `with_sum(..., with_error=True)`, the rows are convolved by
      `matrix_sums.convolve` at every width).
    product_convolve: up to this many multiply-adds (rows x levels x the
      others' law), `convolution.with_sum` convolves the rows with the
      others' law by `matrix_sums.convolve` (BLAS) instead of one tilted FFT
      sum per row.
    matrix_levels: up to this many levels, `any_others.others_mixture` builds
      the others' laws and the target rows' sums by `matrix_sums` (matrix
      products with proved rounding bounds; its power sums too): faster than
      the tilted FFT at 256 levels (docs/performance.md), and ~40x more
      accurate.
    proved_mixes: up to this many multiply-adds (L²(n-1)², L levels, n
      clients), the ±c mixes build the others' laws by `matrix_sums`, with
      their proved error carried (`extreme_others.proved_mixes_apply`);
      above, by the tilted FFT, its proved per-entry error carried too
      (about 100x larger; docs/privacy.md, "Numerics" 3):
      QMGeo at 16 levels, n = 100 (2.5e6) is proved in ~1 s, at 256 levels
      (6.4e8) it would take ~45 s per evaluation against ~8 s.
    attained_operations: multiply-adds the attained end's laws of the
      others may take in all (`attained`: m copies of L levels cost L²m²/2
      each, about 1 s per 1e9); over it the attained search does not apply,
      except calibration's screen, which takes the others' law by the tilted
      FFT sum.
  """
  max_operations: float = 3e10
  max_bytes: float = 3 * 2**30
  pairwise_inputs: int = 4096
  fft_levels: int = 128
  product_convolve: float = 1e9
  matrix_levels: int = 512
  proved_mixes: float = 2e7
  attained_operations: float = 1e9


DEFAULT_LIMITS = Limits()


class CostError(ValueError):
  """An evaluation refused before it starts: its estimated cost exceeds
  `Limits.max_operations` (or its laws `Limits.max_bytes`)."""
