#!/usr/bin/env bash
# Run one study end to end on a GPU host and pack what it produced, for committing as reference
# data (data/reference/<gpu>/<study>/) with scripts/import_reference.py.
#
#   scripts/reference_study.sh STUDY OUTDIR [snakemake args...]
#
# STUDY names the study: `default` (config/config.yaml) or a file config/studies/STUDY.yaml that
# is merged on top of it. The study runs in a private copy of the project under /tmp, so several
# studies can run one after another from one checkout. OUTDIR receives STUDY.tar.gz (the whole
# results/ folder: artifacts, hashes, logs, per-stage wall times, report) and STUDY.log.
set -euo pipefail
study=${1:?usage: reference_study.sh STUDY OUTDIR [snakemake args...]}
outdir=${2:?usage: reference_study.sh STUDY OUTDIR [snakemake args...]}
shift 2
here=$(cd "$(dirname "$0")/.." && pwd)
work=/tmp/headroom-study-$study
rm -rf "$work"
mkdir -p "$work" "$outdir"
tar -C "$here" --exclude=./results --exclude=./.snakemake --exclude=./.git --exclude=./.whl \
    --exclude='*/__pycache__' -cf - . | tar -C "$work" -xf -
args=()
if [ "$study" != default ]; then
    [ -f "$work/config/studies/$study.yaml" ] || { echo "no config/studies/$study.yaml" >&2; exit 2; }
    args+=(--configfile config/config.yaml "config/studies/$study.yaml")
fi
cd "$work"
start=$(date +%s)
status=0
python3 -m snakemake --cores 1 --resources gpu=1 "${args[@]}" "$@" >"$outdir/$study.log" 2>&1 || status=$?
echo "study $study: snakemake exit $status after $(( $(date +%s) - start )) s" | tee -a "$outdir/$study.log"
tar -C "$work" -czf "$outdir/$study.tar.gz" results
exit $status
