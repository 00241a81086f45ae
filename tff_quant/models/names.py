"""The experiments' model names, readable without TensorFlow (`tff_quant.models`)."""

#: The Keras models `tff_quant.models.get` builds, by name.
MODELS = ('emnist_cnn', 'small_cnn', 'lenet5', 'alexnet_small', 'mlp', 'logreg')
