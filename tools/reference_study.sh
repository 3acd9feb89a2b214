#!/usr/bin/env bash
# Run one study end to end on a GPU host and pack what it produced, for committing as reference
# data (data/reference/<gpu>/<study>/) with tools/import_reference.py.
#
#   tools/reference_study.sh STUDY OUTDIR [snakemake args...]
#
# STUDY names the study: `default` (config/config.yaml) or a file config/studies/STUDY.yaml that
# is merged on top of it. It runs in this checkout as the study STUDY, into results/STUDY/ (other
# studies' results are left alone, so several studies can run one after another). OUTDIR receives
# STUDY.tar.gz (results/STUDY/: artifacts, hashes, logs, per-stage wall times, report) and STUDY.log.
set -euo pipefail
study=${1:?usage: reference_study.sh STUDY OUTDIR [snakemake args...]}
outdir=${2:?usage: reference_study.sh STUDY OUTDIR [snakemake args...]}
shift 2
here=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$outdir"
outdir=$(cd "$outdir" && pwd)
cd "$here"
start=$(date +%s)
status=0
python3 -m snakemake --cores 1 --resources gpu=1 --config "studies=[$study]" "$@" >"$outdir/$study.log" 2>&1 || status=$?
echo "study $study: snakemake exit $status after $(( $(date +%s) - start )) s" | tee -a "$outdir/$study.log"
tar -C "$here" -czf "$outdir/$study.tar.gz" "results/$study"
exit $status
