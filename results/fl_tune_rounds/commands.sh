#!/bin/bash
# The commands that produced results/fl_tune_rounds (see docs/fl_table.md,
# "Rounds and the server schedule"). Each call starts at most one run, so
# every run has its own process; repeated until a call starts none.
set -e
mkdir -p results/fl_tune_rounds
# The clip is the one chosen in results/fl_tune: its norm runs are reused.
python - <<'PY'
import json
n = json.load(open('results/fl_tune/norms.json'))
json.dump({k: v for k, v in n.items() if v['client_lr'] == 0.2},
          open('results/fl_tune_rounds/norms.json', 'w'), indent=1)
PY
for i in $(seq 1 20); do
  nice -n 15 python -m experiments.fl_tune --output_dir=results/fl_tune_rounds \
    --rounds=500 --client_lrs=0.2 --server_momenta=0 --clip_multiples=1 --server_lrs=1 \
    --server_lr_schedules=constant,cosine --rerun_top=2 --seeds_top=2 --max_runs=1 \
    > /tmp/stage_iter.log 2>&1
  cat /tmp/stage_iter.log >> results/fl_tune_rounds/fl_tune.log
  grep -q "\[fl_tune\] run " /tmp/stage_iter.log || break
done
