"""Exact privacy accounting of the secure sum (numpy/scipy + dp-accounting; no TF)."""

from tff_quant.accounting import bounds
from tff_quant.accounting import vector
from tff_quant.accounting.calibration import (Calibration, calibrate,
                                              calibration_report)
from tff_quant.accounting.composition import (Guarantee, RoundAccountant,
                                              per_round_rdp,
                                              subsampled_rdp_without_replacement,
                                              training_guarantee)
from tff_quant.accounting.divergence import (SumDivergence, epsilon_infinity,
                                             epsilon_infinity_local,
                                             impossible_mass,
                                             renyi_divergence,
                                             renyi_divergence_of_sum, sum_log_pmf)
from tff_quant.accounting.vector import vector_rdp
