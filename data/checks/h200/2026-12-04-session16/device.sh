#!/usr/bin/env bash
# Measured stages of the MoE studies on the H200, from the repository root with .site-gpu carried:
#   bash data/checks/h200/2026-12-04-session16/device.sh study SECONDS STUDY...   # e.g. study 580 moe moe-azure-conv
#   bash data/checks/h200/2026-12-04-session16/device.sh timing-tests             # pytest -m gpu tests/measure/test_timing.py
#   bash data/checks/h200/2026-12-04-session16/device.sh gpu-tests [SECONDS]      # python3 -m pytest -m gpu
# Each call works in /tmp/after (a copy of the tree made at the lease's first call; later calls of
# the same lease find it and its results/), with Triton and Inductor caches under /tmp. `study` asks
# Snakemake for the measured artifacts by name (environment, calibration, correctness, lifecycle,
# graph_sweep, the six portfolio runs: `--until` with these rules stopped with Snakemake's "Out of
# jobs ready to be started" on this DAG), resumes what an earlier call of the lease left, stops
# SIGINT at SECONDS and packs results/STUDY into $OUT. The analysis stages replay on any CPU.
# Record a study in ONE lease from ONE tree: replay refuses a folder whose artifacts record
# different code (README.md of this folder says how this session learned it).
set -uo pipefail
source tools/device_setup.sh
if [ ! -d /tmp/after ]; then
    mkdir -p /tmp/after && tar --exclude=./.site-gpu -cf - . | tar -xf - -C /tmp/after
fi
cd /tmp/after
export PYTHONPATH=/tmp/site:/tmp/after TRITON_CACHE_DIR=/tmp/triton TORCHINDUCTOR_CACHE_DIR=/tmp/inductor
mode=$1; shift
case "$mode" in
study)
    end=$((SECONDS + $1)); shift
    nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$OUT/gpu.csv"
    for study in "$@"; do
        left=$((end - SECONDS))
        [ "$left" -gt 20 ] || break
        targets=""
        for a in environment calibration correctness lifecycle graph_sweep portfolio/run-{1..6}; do
            targets="$targets results/$study/$a.parquet"
        done
        start=$SECONDS
        timeout -s INT "$left" python3 -m snakemake $targets --cores 1 --resources gpu=1 --rerun-incomplete \
            --config "studies=[$study]" >> "$OUT/$study.log" 2>&1
        echo "study $study: snakemake exit $? after $((SECONDS - start)) s" | tee -a "$OUT/$study.log"
        [ -d "results/$study" ] && tar -czf "$OUT/$study.tar.gz" "results/$study"
    done
    ;;
timing-tests)
    timeout -s INT 120 python3 -m pytest -m gpu -q -ra -p no:cacheprovider tests/measure/test_timing.py > "$OUT/timing_tests.txt" 2>&1
    echo "timing GPU tests exit $?" | tee -a "$OUT/timing_tests.txt"; tail -3 "$OUT/timing_tests.txt"
    ;;
gpu-tests)
    start=$SECONDS
    timeout -s INT "${1:-300}" python3 -m pytest -m gpu -q -ra -p no:cacheprovider > "$OUT/gpu_tests.txt" 2>&1
    echo "pytest -m gpu exit $? after $((SECONDS - start)) s" | tee -a "$OUT/gpu_tests.txt"
    tail -5 "$OUT/gpu_tests.txt"
    ;;
esac
