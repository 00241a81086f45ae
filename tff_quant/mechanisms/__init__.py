"""Quantization-DP mechanisms: samplers (TF) with exact output distributions (numpy)."""

from tff_quant.mechanisms.base import Mechanism
from tff_quant.mechanisms.bq import BQ
from tff_quant.mechanisms.pbm import PBM
from tff_quant.mechanisms.qmgeo import QMGeo
from tff_quant.mechanisms.quantized_gaussian import QuantizedGaussian
from tff_quant.mechanisms.randomized_projection import RandomizedProjection
from tff_quant.mechanisms.rqm import RQM

__all__ = ['Mechanism', 'RQM', 'PBM', 'BQ', 'QMGeo', 'QuantizedGaussian',
           'RandomizedProjection']
