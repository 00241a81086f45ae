#!/bin/bash
# The commands that produced results/fl_tune (2026-11-26, in this order, each
# after the one before; see docs/fl_table.md, "Tuning"). Each resumes: a
# finished run is skipped.
set -e
OUT="--output_dir=results/fl_tune"
# 1. Norm runs at client lr 0.05 and 0.2, then the planned grid in its order;
#    stopped (SIGTERM) after its first 8 runs (clip 1x), the 9th resumed by 3.
nice -n 15 python -m experiments.fl_tune $OUT --deadline=15:28
# 2. Momentum 0.9 at server lr 0.1, clip 1x (replacing momentum at server lr 1
#    at clips 0.5x and 2x).
nice -n 15 python -m experiments.fl_tune $OUT --deadline=15:28 --server_momenta=0.9 \
  --server_lrs=0.1 --clip_multiples=1 --rerun_top=0 --nonoise_free_at_choice
# 3. No momentum at clips 0.5x and 2x.
nice -n 15 python -m experiments.fl_tune $OUT --deadline=15:28 --server_momenta=0 \
  --clip_multiples=0.5,2 --rerun_top=0 --nonoise_free_at_choice
# 4. The two best per eps at seed 1 (then: the best by mean endpoint), noise-free at the choice.
nice -n 15 python -m experiments.fl_tune $OUT --deadline=15:28 --server_momenta=0 \
  --clip_multiples=1 --rerun_top=2 --seeds_top=2
# 5. 600 noise-free, unclipped rounds at client lr 0.2: is 300 converged?
nice -n 15 python -m experiments.fl_emnist --dataset=fashion_mnist --mechanism=none \
  --model=small_cnn --clip_norm=1000000 --client_lr=0.2 --rounds=600 --clients_per_round=100 \
  --total_clients=3400 --split_seed=0 --seed=0 --eval_every=10 --validation_fraction=0.1 \
  --rotate --coordinate_clip_multiple=3 --root_output_dir=results/fl_tune/noise_free_long \
  --experiment_name=noise_free_lr0.2_600rounds
# 6. Per eps the chosen point and the best other at seeds up to 2, then the
#    3 leading points up to seed 3 (until the deadline).
nice -n 15 python -m experiments.fl_tune $OUT --deadline=15:26 --server_momenta=0 \
  --clip_multiples=1 --rerun_top=2 --seeds_top=3
nice -n 15 python -m experiments.fl_tune $OUT --deadline=15:24 --server_momenta=0 \
  --clip_multiples=1 --rerun_top=3 --seeds_top=4
