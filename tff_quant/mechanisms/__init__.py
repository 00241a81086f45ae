"""Quantization-DP mechanisms: samplers (TF) with exact output distributions (numpy).

`registry()` lists every mechanism of this package by name; a new module here
with a `Mechanism` subclass that sets `name` is all it takes to add one.

What each export is for (laws, parameters, departures from the papers:
docs/mechanisms.md):
* `Mechanism`: the protocol (`encode`/`decode` in TF, `log_pmf` exact in
  numpy, `TUNABLES`, `for_coordinate_bound`); `Tunable`: one free parameter.
* `RQM`, `PBM`, `BQ`, `QMGeo`, `QuantizedGaussian`, `RandomizedProjection`:
  the papers' mechanisms; `DistributedSkellam`, `DistributedDiscreteGaussian`:
  TFF's DistributedDpSumFactory per coordinate (modular sum); `Gaussian`: the
  continuous reference (central, accounted only).
* `registry()` {name: class}, `get(name)`, `build(name, c_inf, **params)`,
  `variants()`: the mechanisms by name.
* The module `utility`: the debiased error Var/slope² and the refusal rules
  (docs/utility.md).
* The module `wire`: a level sum in a secure-sum field of 2^b (wrap bound,
  the wire bits a cohort needs, centred decode; docs/bits.md).
"""

from tff_quant.mechanisms.base import Mechanism, Tunable
from tff_quant.mechanisms.bq import BQ
from tff_quant.mechanisms.ddgauss import DistributedDiscreteGaussian
from tff_quant.mechanisms.gaussian import Gaussian
from tff_quant.mechanisms.pbm import PBM
from tff_quant.mechanisms.qmgeo import QMGeo
from tff_quant.mechanisms.quantized_gaussian import QuantizedGaussian
from tff_quant.mechanisms.randomized_projection import RandomizedProjection
from tff_quant.mechanisms.registry import build, get, registry, variants
from tff_quant.mechanisms.rqm import RQM
from tff_quant.mechanisms.skellam import DistributedSkellam
from tff_quant.mechanisms import utility
from tff_quant.mechanisms import wire

__all__ = ['Mechanism', 'Tunable', 'RQM', 'PBM', 'BQ', 'QMGeo', 'QuantizedGaussian',
           'RandomizedProjection', 'DistributedDiscreteGaussian',
           'DistributedSkellam', 'Gaussian', 'registry', 'get', 'build', 'variants',
           'utility', 'wire']
