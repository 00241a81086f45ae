"""Exact privacy accounting of the secure sum (numpy/scipy + dp-accounting; no TF).

What each export is for (what the numbers mean: docs/privacy.md):
* `training_guarantee(mech, rounds, clients_per_round, total_clients, delta,
  dim, l2_clip=...)` -> `Guarantee`: (ε, δ) of a whole run;
  `Guarantee.interval()` reads ε ∈ [attained, proved].
* `RoundAccountant`: per-round RDP once, then (ε, δ) after any number of
  rounds (`epsilon_rdp`, `epsilon_attained`, `guarantee`).
* `calibrate` / `calibration_report` -> `Calibration`: a registered
  mechanism's free parameters for a target (ε, δ), the one with the least
  debiased error (docs/utility.md); `Calibration.setting`
  (`CalibratedSetting`) is every assumption its ε rests on, which
  `aggregators.mechanism_factory(..., calibrated_for=...)` enforces, and
  `Calibration.guarantee()` recomputes its ε. `CannotCarrySignal`: every candidate
  meeting the target was refused (it names why, and the bits a modular sum
  needs); `AttainedUnavailable`: bound='attained' where that end cannot be
  computed.
* `per_round_rdp` (coordinate route), `vector_rdp` (ℓ2 route),
  `subsampled_rdp_without_replacement` (WBK19 Thm 9).
* `renyi_divergence_of_sum`, `SumDivergence`, `epsilon_infinity`,
  `epsilon_infinity_local`, `impossible_mass`, `renyi_divergence`,
  `sum_log_pmf`: divergences and laws of one coordinate's secure sum.
* Modules, one per step of the ε pipeline: `per_round` (one round's RDP),
  `rdp_route` (subsampling, RDP → (ε, δ)), `pld_route` (the PLD route),
  `composition` (over rounds: `Guarantee`); and `attained` (the lower end:
  divergences named inputs attain), `others` (the bound for any inputs of
  the other clients), `blankets` (the part of their noise it rests on),
  `secure_sum` (the ℓ2 route: `divergence_curve`, the `Limits` it runs
  under), `bounds` (each paper's closed form, for comparison only),
  `provenance` (`SOURCE_DIGEST`: which accountant's code computed an ε),
  `setting` (`coordinate_clip(S, d, k)`: c∞ = k·S/√d, computed there only;
  `CalibratedSetting`: `round_accountant`, `build_mechanism`, `checked_clip`),
  `conventions` (ε in the papers' convention, add/remove and Poisson: for
  comparison with published results only, never a guarantee).
"""

from tff_quant.accounting import attained
from tff_quant.accounting import blankets
from tff_quant.accounting import bounds
from tff_quant.accounting import conventions
from tff_quant.accounting import others
from tff_quant.accounting import provenance
from tff_quant.accounting import secure_sum
from tff_quant.accounting import setting
from tff_quant.accounting.calibration import (AttainedUnavailable,
                                              CalibratedSetting, Calibration,
                                              CannotCarrySignal, calibrate,
                                              calibration_report)
from tff_quant.accounting.composition import (Guarantee, RoundAccountant,
                                              training_guarantee)
from tff_quant.accounting.divergence import (SumDivergence, epsilon_infinity,
                                             epsilon_infinity_local,
                                             impossible_mass,
                                             renyi_divergence,
                                             renyi_divergence_of_sum, sum_log_pmf)
from tff_quant.accounting.per_round import per_round_rdp
from tff_quant.accounting.rdp_route import subsampled_rdp_without_replacement
from tff_quant.accounting.secure_sum import vector_rdp
