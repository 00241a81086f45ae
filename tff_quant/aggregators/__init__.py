"""TFF aggregation factories: any tff_quant mechanism behind TFF's secure sum."""

from tff_quant.aggregators.constructors import (UniformlyWeighted, bq_factory, clipped_mean_factory,
                                                mechanism_factory, pbm_factory,
                                                qmgeo_factory,
                                                quantized_gaussian_factory,
                                                rqm_factory, weighted)
from tff_quant.aggregators.quantization_factory import (Created,
                                                        QuantizationFactory,
                                                        find_measurements,
                                                        mechanisms_used,
                                                        recording,
                                                        secure_sum_bits)
