#!/bin/bash
# One analysis stage of the default reference's replay, alternating the tree before this session (a
# worktree of bc9b8c7 at /tmp/wt-old, run with its own PYTHONPATH) and this one, ROUNDS rounds:
#   git worktree add /tmp/wt-old bc9b8c7
#   bash data/checks/cpu/2026-12-05-session22/stage_ab.sh decision 3
# Prints the stage's own wall seconds (its log's "finished in") and the job's (benchmarks/: s, cpu_time).
stage=$1; rounds=${2:-3}
R=results/replay-h200-default-flashinfer-6x160
for i in $(seq "$rounds"); do
  for arm in old new; do
    if [ $arm = old ]; then dir=/tmp/wt-old; else dir=/work/main; fi
    (cd $dir && PYTHONPATH=$dir snakemake --cores 2 --config replay=data/reference/h200/default-flashinfer-6x160 \
        --forcerun "$stage" --until "$stage" > "/tmp/stage_ab_$arm.log" 2>&1) || echo "FAIL $arm"
    wall=$(grep -h "finished in" "$dir/$R/logs/$stage.log" | tail -1 | grep -o "in [0-9.]* s")
    echo "$arm stage $wall, job (s, cpu_time) $(tail -1 "$dir/$R/benchmarks/$stage.tsv" | cut -f1,10)"
  done
done
