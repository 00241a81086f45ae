#!/usr/bin/env bash
# The RQM-vs-PBM-vs-noise-free comparison of docs/experiments.md (the RQM
# paper's App. C setup). Resumable: run it again after an interruption and
# each run continues from its last checkpoint.
set -euo pipefail
usage() {
  cat <<USAGE
Usage: bash experiments/run_fl_comparison.sh [--output_dir=DIR] [--rounds=R]

Trains the noise-free clipped mean, RQM and PBM in the RQM paper's FL setup
(docs/experiments.md), then plots them. Runs resume where they stopped.
  --output_dir=DIR  where the runs go (default runs/fl_comparison; the
                    committed results/fl/ came from an earlier version of the
                    code and is not resumed by this one)
  --rounds=R        rounds per run (default 300)
  -h, --help        this text
USAGE
}
OUTPUT_DIR=runs/fl_comparison
ROUNDS=300
for arg in "$@"; do
  case "$arg" in
    -h|--help) usage; exit 0 ;;
    --output_dir=*) OUTPUT_DIR="${arg#*=}" ;;
    --rounds=*) ROUNDS="${arg#*=}" ;;
    *) echo "error: unknown argument '$arg' (see --help)" >&2; exit 2 ;;
  esac
done
if ! [[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]]; then
  echo "error: --rounds=$ROUNDS must be an integer >= 1" >&2; exit 2
fi
cd "$(dirname "$0")/.."
declare -A PARAMS=([none]="" [rqm]="num_levels=16,q=0.42,delta_ratio=1.0"
                    [pbm]="num_levels=16,theta=0.25")
for mech in none rqm pbm; do
  .venv/bin/python -m experiments.fl_emnist --dataset=fashion_mnist \
    --mechanism=$mech --mechanism_params="${PARAMS[$mech]}" --model=lenet5 \
    --rounds="$ROUNDS" --clients_per_round=40 \
    --total_clients=3400 --client_lr=0.05 --server_lr=1.0 --batch_size=32 \
    --clip_norm=0.03 --eval_every=10 --noise_seed=1 \
    --root_output_dir="$OUTPUT_DIR" --experiment_name=$mech
done
.venv/bin/python -m experiments.plot_fl \
  --run_dirs="$OUTPUT_DIR/none,$OUTPUT_DIR/rqm,$OUTPUT_DIR/pbm" \
  --output="$OUTPUT_DIR/fl_fashion_mnist.png"
