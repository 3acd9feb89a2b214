#!/usr/bin/env bash
# Session 20 on the H200 (issue 33, the azure-conv reference with FlashInfer, and pytest -m gpu with
# the held-out test's between-lease interval; issue 36, artifacts written more compactly), from the
# repository root with .site-gpu carried:
#   bash data/checks/h200/2026-12-04-session20/device.sh pieces           # stash the FlashInfer pieces carried
#   bash data/checks/h200/2026-12-04-session20/device.sh jit              # FlashInfer installed, its JIT built
#   bash data/checks/h200/2026-12-04-session20/device.sh gpu-tests [S]    # pytest -m gpu, stopped at S seconds
#   bash data/checks/h200/2026-12-04-session20/device.sh study S STUDY    # the whole DAG of STUDY, resumable
# FlashInfer's JIT cache lives in /tmp/fi-ws (FLASHINFER_WORKSPACE_BASE), built once per machine,
# as on a server (`jit` builds it; the study's environment stage records it warm). `study`
# runs from /tmp/study, unpacked from .site-gpu/tree.tar (`git archive HEAD`, carried in the lease's
# first study call: the committed tree, nothing uncommitted) with EMPTY Triton and Inductor caches of
# its own, every stage of the DAG (analysis included: issue 36's per-stage times), stops SIGINT
# at S seconds and packs results/STUDY into $OUT; a later call of the same lease resumes it.
# Session 19's recipe with the JIT apart from the tests, so that the study can run before them.
set -uo pipefail
source tools/device_setup.sh || exit 1
export FLASHINFER_WORKSPACE_BASE=/tmp/fi-ws
mode=$1; shift
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$OUT/gpu.csv"
case "$mode" in
pieces)
    ls -la /tmp/pieces/flashinfer 2>&1 | tail -8
    ;;
jit)
    tools/device_flashinfer.sh --require || exit 1
    python3 tools/wheelhouse_check.py --installed /tmp/flashinfer-wheels --no-deps \
        --root flashinfer-python==0.7.2.post1 --root apache-tvm-ffi==0.1.15.post2 --root cuda-tile==1.7.0 \
        --root torch-c-dlpack-ext==0.1.5 > "$OUT/flashinfer_check.txt" 2>&1
    echo "wheelhouse_check exit $?" | tee -a "$OUT/flashinfer_check.txt"
    export TRITON_CACHE_DIR=/tmp/triton-tests TORCHINDUCTOR_CACHE_DIR=/tmp/inductor-tests
    start=$SECONDS
    python3 - > "$OUT/jit.txt" 2>&1 <<'PY'
from headroom.core import defaults
from headroom.families.attention import flashinfer
from headroom.measure.environment import flashinfer_facts
part = defaults.section("partition")
print("before", flashinfer_facts())
s = flashinfer.warm(part, list(flashinfer.BACKENDS), float(part["rope_base"]))
print(f"warm: {s:.1f} s")
print("after", flashinfer_facts())
s = flashinfer.warm(part, list(flashinfer.BACKENDS), float(part["rope_base"]))
print(f"warm again: {s:.1f} s")
PY
    echo "jit exit $? after $((SECONDS - start)) s" | tee -a "$OUT/jit.txt"; tail -4 "$OUT/jit.txt"
    ;;
gpu-tests)
    tools/device_flashinfer.sh --require || exit 1
    export TRITON_CACHE_DIR=/tmp/triton-tests TORCHINDUCTOR_CACHE_DIR=/tmp/inductor-tests
    start=$SECONDS
    timeout -s INT "${1:-360}" python3 -m pytest -m gpu -q -ra -p no:cacheprovider > "$OUT/gpu_tests.txt" 2>&1
    echo "pytest -m gpu exit $? after $((SECONDS - start)) s" | tee -a "$OUT/gpu_tests.txt"
    tail -8 "$OUT/gpu_tests.txt"
    ;;
study)
    tools/device_flashinfer.sh --require || exit 1
    end=$((SECONDS + $1)); study=$2
    if [ ! -d /tmp/study ]; then
        mkdir -p /tmp/study && tar -xf .site-gpu/tree.tar -C /tmp/study || exit 1
        rm -rf /tmp/triton-study /tmp/inductor-study
    fi
    cd /tmp/study
    export PYTHONPATH=/tmp/site:/tmp/study TRITON_CACHE_DIR=/tmp/triton-study TORCHINDUCTOR_CACHE_DIR=/tmp/inductor-study
    start=$SECONDS
    timeout -s INT $((end - SECONDS)) python3 -m snakemake --cores 1 --resources gpu=1 --rerun-incomplete \
        --config "studies=[$study]" >> "$OUT/$study.log" 2>&1
    echo "study $study: snakemake exit $? after $((SECONDS - start)) s" | tee -a "$OUT/$study.log"
    [ -d "results/$study" ] && tar -czf "$OUT/$study.tar.gz" "results/$study"
    tail -3 "$OUT/$study.log"
    ;;
esac
