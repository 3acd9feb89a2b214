#!/bin/bash
# Every H200 reference replayed by the tree before this session (worktree /tmp/wt-old at bc9b8c7) and
# this one: the decision table of each, and every analysis table of the default and azure-conv
# studies, compared (pandas assert_frame_equal; the hash columns of artifacts whose code changed aside).
#   bash data/checks/cpu/2026-12-05-session22/identical.sh
compare() {  # ref table...
  ref=$1; shift
  python3 - "$ref" "$@" <<'PY'
import sys
import pandas as pd
ref, tables = sys.argv[1], sys.argv[2:]
for t in tables:
    a = pd.read_parquet(f"/tmp/wt-old/results/replay-h200-{ref}/{t}.parquet")
    b = pd.read_parquet(f"/work/main/results/replay-h200-{ref}/{t}.parquet")
    hashes = [c for c in ("dispatch_blake3", "decision_blake3") if c in a]
    pd.testing.assert_frame_equal(a.drop(columns=hashes), b.drop(columns=hashes))
print(f"{ref}: {', '.join(tables)} identical")
PY
}
for ref in azure-conv-flashinfer-6x160 default-flashinfer-6x160 moe-6x160 moe-azure-conv-6x160 \
    mooncake-conv-flashinfer-3x30 rmsnorm-6x160; do
  until=decision; tables=decision
  case $ref in default-*|azure-conv-*) until=all; tables="policy_eval factorial decision recommendation roofline";; esac
  for dir in /tmp/wt-old /work/main; do
    rm -rf "$dir/results/replay-h200-$ref"
    (cd $dir && PYTHONPATH=$dir snakemake --cores 2 --config replay=data/reference/h200/$ref \
        $([ $until = all ] || echo --until decision) > /tmp/identical.log 2>&1) || echo "FAIL $dir $ref"
  done
  compare "$ref" $tables
done
