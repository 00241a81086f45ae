"""Keras models for the experiments, and their TFF learning wrapper."""

from tff_quant.models.keras_models import MODELS, get, num_params, update_dim
from tff_quant.models.learning import tff_model_fn
