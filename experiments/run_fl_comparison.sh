#!/usr/bin/env bash
# The runs README quotes for the RQM-vs-PBM-vs-noise-free comparison (issue 6).
# Resumable: run it again after an interruption and each run continues.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-300}
declare -A PARAMS=([none]="" [rqm]="num_levels=16,q=0.42,delta_ratio=1.0"
                    [pbm]="num_levels=16,theta=0.25")
for mech in none rqm pbm; do
  .venv/bin/python -m experiments.fl_emnist --dataset=fashion_mnist \
    --mechanism=$mech --mechanism_params="${PARAMS[$mech]}" --model=lenet5 \
    --rounds=$ROUNDS --clients_per_round=40 \
    --total_clients=3400 --client_lr=0.05 --server_lr=1.0 --batch_size=32 \
    --clip_norm=0.03 --eval_every=10 --noise_seed=1 \
    --root_output_dir=results/fl --experiment_name=$mech
done
.venv/bin/python -m experiments.plot_fl --run_dirs=results/fl/none,results/fl/rqm,results/fl/pbm \
  --output=results/fl/fl_fashion_mnist.png
