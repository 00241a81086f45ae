#!/bin/bash
# The tuned FL table (docs/fl_table.md): the training chosen on the
# validation split (results/fl_tune_rounds/choice.json), 500 rounds. It
# resumes: a finished run is skipped, so the same folder grows across
# sessions. Started as a pilot (gaussian and pbm at 8 bits, both ε) to size
# the seeds from the paired variance; the other mechanisms and bit widths
# join the same folder (add them to --mechanisms, --bits and
# --mechanism_bits). Two processes may share the work: one in a second
# folder of the same settings (--output_dir), its finished runs, calibrations
# and run seconds then copied into this one. A calibration made by other
# accountant code is rechecked before its cell trains again (docs/fl_table.md).
nice -n 15 python -m experiments.fl_table --output_dir=results/fl_table_tuned \
  --tuned=results/fl_tune_rounds/choice.json --rounds=500 --eval_every=10 \
  --client_lr=0.2 --clip_norm=0.518 --max_calibration_seconds=1800 \
  --mechanisms=gaussian,pbm,rqm,quantized_gaussian,qmgeo,randomized_projection,ddgauss,skellam,bq,tff_dgauss,tff_skellam,none \
  --bits=8 --mechanism_bits=ddgauss=16,skellam=16,bq=10 --peer_bits=16 \
  --epsilons=10,3 --seeds=4
