#!/usr/bin/env bash
# The calls of 2026-12-04 (session 15) on the H200, from the repository root with .site-gpu carried:
#   bash data/checks/h200/2026-12-04-session15/device.sh tune    # copy the tree, tune QWEN3, GPU tests
#   bash data/checks/h200/2026-12-04-session15/device.sh study   # the moe study on the default trace
#   bash data/checks/h200/2026-12-04-session15/device.sh all     # tune, the MoE GPU tests, then the study
# Each call works in /tmp/after (a copy of the tree; a later call of the same lease finds it), with
# Triton and Inductor caches under /tmp, and leaves its logs and results under $OUT.
set -uo pipefail
source tools/device_setup.sh
if [ ! -d /tmp/after ]; then
    mkdir -p /tmp/after && tar --exclude=./.site-gpu -cf - . | tar -xf - -C /tmp/after
fi
cd /tmp/after
export PYTHONPATH=/tmp/site:/tmp/after TRITON_CACHE_DIR=/tmp/triton TORCHINDUCTOR_CACHE_DIR=/tmp/inductor
case "$1" in
tune)
    nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$OUT/gpu.csv"
    timeout 420 python3 -m headroom.core.cli tune headroom.families.moe.family:QWEN3 \
        --out "$OUT/tune" > "$OUT/tune.log" 2>&1
    echo "tune exit $?"; head -25 "$OUT/tune.log"
    cp "$OUT"/tune/E=128,N=1536,device_name=NVIDIA_H200*.json headroom/families/moe/tables/
    timeout -s INT 150 python3 -m pytest -m gpu -q -ra -p no:cacheprovider tests/kernels/test_moe.py \
        tests/families/test_moe_family_gpu.py > "$OUT/gpu_tests_moe.txt" 2>&1
    tail -5 "$OUT/gpu_tests_moe.txt"
    ;;
gpu-tests)
    timeout -s INT 300 python3 -m pytest -m gpu -q -ra -p no:cacheprovider > "$OUT/gpu_tests.txt" 2>&1
    tail -5 "$OUT/gpu_tests.txt"
    ;;
final)
    bash "$0" gpu-tests
    start=$SECONDS
    timeout -s INT 120 python3 -m headroom.core.cli family check headroom.families.moe.family:QWEN3 --device cuda \
        --trace-of default --max-shapes 53 > "$OUT/family_check.txt" 2>&1
    echo "family check exit $?, $((SECONDS - start)) s" | tee -a "$OUT/family_check.txt"
    ;;
all)
    bash "$0" tune && grep -q " passed" "$OUT/gpu_tests_moe.txt" && ! grep -q "failed" "$OUT/gpu_tests_moe.txt" \
        && bash "$0" study $((570 - SECONDS))
    ;;
study)
    timeout -s INT "${2:-540}" python3 -m snakemake --cores 1 --resources gpu=1 --rerun-incomplete \
        --config 'studies=[moe]' > "$OUT/study.log" 2>&1
    echo "snakemake exit $?"
    tar czf "$OUT/moe-results.tar.gz" results/moe
    tail -5 "$OUT/study.log"
    ;;
esac
