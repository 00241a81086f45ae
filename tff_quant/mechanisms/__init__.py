"""Quantization-DP mechanisms: samplers (TF) with exact output distributions (numpy).

`registry()` lists every mechanism of this package by name; a new module here
with a `Mechanism` subclass that sets `name` is all it takes to add one.
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

__all__ = ['Mechanism', 'Tunable', 'RQM', 'PBM', 'BQ', 'QMGeo', 'QuantizedGaussian',
           'RandomizedProjection', 'DistributedDiscreteGaussian',
           'DistributedSkellam', 'Gaussian', 'registry', 'get', 'build', 'variants']
