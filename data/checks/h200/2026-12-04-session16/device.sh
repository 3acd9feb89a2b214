#!/usr/bin/env bash
# The calls of 2026-12-04 (session 16) on the H200, from the repository root with .site-gpu carried:
#   bash data/checks/h200/2026-12-04-session16/device.sh study SECONDS   # the moe studies' measured stages
#   bash data/checks/h200/2026-12-04-session16/device.sh gpu-tests       # python3 -m pytest -m gpu
# Each call works in /tmp/after (a copy of the tree; a later call of the same lease finds it), with
# Triton and Inductor caches under /tmp (empty at the lease's first call), and leaves its logs and a
# tarball of results/ under $OUT. `study` runs the measured stages (snakemake --until: environment,
# calibrate, correctness, lifecycle, graph_sweep, the six portfolio runs) of `moe`, then of
# `moe-azure-conv`, resuming what an earlier call of the lease left (--rerun-incomplete), and stops
# SIGINT at SECONDS; the analysis stages replay from the imported references on any CPU.
set -uo pipefail
source tools/device_setup.sh
if [ ! -d /tmp/after ]; then
    mkdir -p /tmp/after && tar --exclude=./.site-gpu -cf - . | tar -xf - -C /tmp/after
fi
cd /tmp/after
export PYTHONPATH=/tmp/site:/tmp/after TRITON_CACHE_DIR=/tmp/triton TORCHINDUCTOR_CACHE_DIR=/tmp/inductor
MEASURED="environment calibrate correctness lifecycle graph_sweep portfolio"
case "$1" in
study)
    end=$((SECONDS + ${2:-560}))
    nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$OUT/gpu.csv"
    for study in moe moe-azure-conv; do
        left=$((end - SECONDS))
        [ "$left" -gt 20 ] || break
        start=$SECONDS
        timeout -s INT "$left" python3 -m snakemake --cores 1 --resources gpu=1 --rerun-incomplete \
            --config "studies=[$study]" --until $MEASURED >> "$OUT/$study.log" 2>&1
        echo "study $study: snakemake exit $? after $((SECONDS - start)) s" | tee -a "$OUT/$study.log"
        [ -d "results/$study" ] && tar -C /tmp/after -czf "$OUT/$study.tar.gz" "results/$study"
    done
    ;;
gpu-tests)
    start=$SECONDS
    timeout -s INT "${2:-300}" python3 -m pytest -m gpu -q -ra -p no:cacheprovider > "$OUT/gpu_tests.txt" 2>&1
    echo "pytest -m gpu exit $? after $((SECONDS - start)) s" | tee -a "$OUT/gpu_tests.txt"
    tail -5 "$OUT/gpu_tests.txt"
    ;;
timing-tests)
    timeout -s INT 120 python3 -m pytest -m gpu -q -ra -p no:cacheprovider tests/measure/test_timing.py > "$OUT/timing_tests.txt" 2>&1
    echo "timing GPU tests exit $?" | tee -a "$OUT/timing_tests.txt"; tail -3 "$OUT/timing_tests.txt"
    ;;
esac
