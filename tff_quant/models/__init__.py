"""Keras models for the experiments."""

from tff_quant.models.keras_models import MODELS, get, num_params
