"""A registered mechanism's free parameters that meet a target (ε, δ) for a training run.

Generic over `tff_quant.mechanisms.registry()`: the class declares its tunables
(range, default, which direction is more private) and which ones calibration
searches (`CALIBRATED`: every parameter that trades privacy for accuracy). The
last is searched along its privacy direction; earlier ones are scanned over
their declared grid (or the integers within the bit budget), and among the
candidates that meet the target and carry the signal, the one with the
smallest debiased error wins: the worst Var/slope² of the decoded mean of the
round's clients sharing an input |x| <= a (`mechanisms.utility`; a = ℓ2
clip/√d on the ℓ2 route, the rms coordinate of an update at the clip, else
the coordinate clip). Plain MSE would reward outputs that stay near 0 whatever
the input (a wrapped modular sum, a quantizer clipping noise far wider than
its range). A candidate that cannot carry the signal is refused: a modular
sum whose modulus does not hold its summed noise as TFF's
DistributedDpSumFactory sizes it, or a decoded mean with slope < 1/2
(`utility.MIN_SLOPE`); when every candidate meeting the target is refused,
`CannotCarrySignal` says why and, for a modular sum, the bits it needs.
`calibration_report` also calibrates the continuous Gaussian to the same
target, for the ratio.

Where the ±c mixes of the others leave ε unchanged at the first candidate
they apply to, later candidates are bounded by the mixture bound over the
others alone (`secure_sum.PairBounds`, `oracle.Epsilon`): a proved ε, at or above
the one `training_guarantee` gives. The answer's ε is the whole
accountant's.

Which ε meets the target (`bound`): 'proved' (the default) is the
accountant's ε, a guarantee for any inputs of the other clients. 'attained'
is the same route's ε from the per-round divergences that named inputs
attain (`RoundAccountant.epsilon_attained`, `accounting.attained`): what a
perfect bound over the others' inputs could at best allow on this route, so
its calibration is the optimistic end of what the mechanism could be
calibrated to. It is NOT a privacy guarantee (a mechanism calibrated so may
exceed the target under the proved bound, and a tighter proof could land
anywhere between the two ends); it exists to tell which comparisons survive
the slack of our bounds. Where the divergences are exact in closed form
(gaussian) the two ends coincide, and for the modular sums (skellam, ddgauss)
on the coordinate route; on the ℓ2 route theirs differ by the chord
majorant's gap (`accounting.attained`); where the attained search
does not apply (its others' law over `secure_sum.Limits.attained_operations`),
`AttainedUnavailable` says so rather than fall back to the proved ε. RDP
route only (not with use_pld).

The package, one module per step (a newcomer reads file names, then one
function):

* `interface.py`: what the search asks of an accountant (`Oracle`,
  `EpsilonEstimate`, `SearchLimits`) and the `Axis` a parameter is searched on.
* `search.py`, `bracket.py`: accountant-free root finding (as dp_accounting's
  `mechanism_calibration`), tested against closed-form fake oracles.
* `oracle.py`: the one place that decides a candidate's ε (`Epsilon`).
* `scan.py`: the grid scan and its incumbent (`Scan`).
* `refusals.py`: why there is no answer, in words (`CannotCarrySignal`).
* `report.py`: `calibrate`, `calibration_report`, `Calibration`.
* `wire.py`: `calibrate_for_wire_bits` -> `WireCalibration`: the level count
  and parameters chosen together for a secure-sum field of 2^b (docs/bits.md).
"""

from tff_quant.accounting.calibration.interface import (SAFE_END_FIRST,
                                                        EpsilonEstimate,
                                                        Oracle, SearchLimits)
from tff_quant.accounting.calibration.oracle import (ATTAINED_NOTE, BOUNDS,
                                                     FAST_ORDERS,
                                                     AttainedUnavailable)
from tff_quant.accounting.calibration.refusals import CannotCarrySignal
from tff_quant.accounting.calibration.report import (CALIBRATED_FOR,
                                                     CalibratedSetting,
                                                     Calibration, Limits,
                                                     calibrate,
                                                     calibration_report,
                                                     mechanism_for_bits)
from tff_quant.accounting.calibration.scan import PROGRESS_AFTER, SCAN_RTOL
from tff_quant.accounting.calibration.wire import (WireCalibration,
                                                   calibrate_for_wire_bits)
