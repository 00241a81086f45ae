"""Training with the quantization mechanisms: FedAvg and distributed SGD on TFF.

Resumable FedAvg with a tff_quant aggregator, its checkpoints, metrics and
privacy accounting (`federated_training`), the run's frozen config (`config`)
and its privacy plan, made once before TFF from the model's d (`privacy_plan`:
calibrated or given mechanism, or TFF peer, and its accountant, which the
factory and the summary read); several simulated clients per TFF
client slot (`packed_clients`), trained as one batched computation
(`vectorized_clients`); distributed SGD, one clipped gradient per client and
round (`distributed_sgd`); tuning on a validation split (`tuning`).

Importing this package imports none of its modules (they import TensorFlow and
TFF): import the module you use, e.g.
`from tff_quant.training import federated_training`.
"""
