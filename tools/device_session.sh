#!/usr/bin/env bash
# One session's calls on the offline H200 (the device tool), from the repository root with
# .site-gpu carried (tools/wheelhouse.sh --flashinfer; docs/airgapped.md). Sessions 18-20 each kept
# a copy of this recipe in their record folder (data/checks/h200/*/device.sh); from session 21 on
# it lives here and a session's README names the commit it ran.
#   bash tools/device_session.sh pieces           # stash the FlashInfer pieces this call carries
#   bash tools/device_session.sh jit              # FlashInfer installed (all pieces there), its JIT built
#   [TARGETS=...] bash tools/device_session.sh study S STUDY [KEY=VALUE ...]   # the whole DAG of STUDY
#                                                 # (or TARGETS and what they need), resumable,
#                                                 # stopped at S seconds; KEY=VALUE: more --config, e.g.
#                                                 # 'correctness={compile_workers: 8}
#   bash tools/device_session.sh ab S STUDY A B   # tools/portfolio_ab.py on STUDY's measured inputs:
#                                                 # arms A and B (KEY=VALUE[,...] over portfolio:), eager
#   bash tools/device_session.sh gpu-tests [S]    # pytest -m gpu, stopped at S seconds
#   bash tools/device_session.sh before S STUDY TARGET...   # the tree BEFORE a change, for a
#                                                 # before/after on one host in one sitting: TARGETs of
#                                                 # STUDY built from .site-gpu/tree-before.tar, stopped at S
# FlashInfer's JIT cache lives in /tmp/fi-ws (FLASHINFER_WORKSPACE_BASE), built once per machine as
# on a server (`jit` builds it; a study's environment stage records it warm). `study` runs from
# /tmp/study, unpacked from .site-gpu/tree.tar (`git archive HEAD`, carried in the lease's first
# study call: the committed tree, nothing uncommitted) with EMPTY Triton and Inductor caches of its
# own, every stage of the DAG (analysis included: issue 36's per-stage times), stops SIGINT at S
# seconds and packs results/STUDY into $OUT; a later call of the same lease resumes it. `ab` runs in
# that same folder and caches, after the study's correctness stage.
set -uo pipefail
source tools/device_setup.sh || exit 1
export FLASHINFER_WORKSPACE_BASE=/tmp/fi-ws
mode=$1; shift
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$OUT/gpu.csv"
# snakemake_for S NAME STUDY [ARG ...]: STUDY's jobs (ARGs: more of snakemake's, targets after `--`),
# stopped at S seconds (SIGINT: resumable), logged to $OUT/NAME.log; results/STUDY packed as NAME.tar.gz
snakemake_for() {
    local limit=$1 name=$2 study=$3 start=$SECONDS; shift 3
    timeout -s INT "$limit" python3 -m snakemake --cores 1 --resources gpu=1 --rerun-incomplete \
        --config "studies=[$study]" "$@" >> "$OUT/$name.log" 2>&1
    echo "$mode $study: snakemake exit $? after $((SECONDS - start)) s" | tee -a "$OUT/$name.log"
    [ -d "results/$study" ] && tar -czf "$OUT/$name.tar.gz" "results/$study"
    tail -3 "$OUT/$name.log"
}
study_env() {
    cd /tmp/study || exit 1
    export PYTHONPATH=/tmp/site:/tmp/study TRITON_CACHE_DIR=/tmp/triton-study TORCHINDUCTOR_CACHE_DIR=/tmp/inductor-study
}
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
PY
    echo "jit exit $? after $((SECONDS - start)) s" | tee -a "$OUT/jit.txt"; tail -3 "$OUT/jit.txt"
    ;;
study)
    tools/device_flashinfer.sh --require || exit 1
    end=$((SECONDS + $1)); study=$2; shift 2
    if [ ! -d /tmp/study ]; then
        mkdir -p /tmp/study && tar -xf .site-gpu/tree.tar -C /tmp/study || exit 1
        rm -rf /tmp/triton-study /tmp/inductor-study
    fi
    study_env
    # the study tree's own modules (device_setup compiled the call's copy): nothing left to compile
    [ -f /tmp/study/.compiled ] || { python3 tools/precompile.py --root /tmp/study >> "$OUT/$study.log" 2>&1; touch /tmp/study/.compiled; }
    # TARGETS (space-separated files, e.g. results/default/correctness.parquet): only those and what
    # they need, not the whole DAG
    snakemake_for $((end - SECONDS)) "$study" "$study" "$@" -- ${TARGETS:-}
    ;;
ab)
    tools/device_flashinfer.sh --require || exit 1
    limit=$1; study=$2; arm_a=$3; arm_b=$4
    study_env
    start=$SECONDS
    timeout -s INT "$limit" python3 tools/portfolio_ab.py --results "results/$study" --out "$OUT/ab" \
        --arm "$arm_a" --arm "$arm_b" --every 4 --rounds 2 --mode eager > "$OUT/ab.log" 2>&1
    echo "portfolio_ab exit $? after $((SECONDS - start)) s" | tee -a "$OUT/ab.log"
    tail -30 "$OUT/ab.log"
    ;;
before)
    # The tree before (`git archive OLD -- . ':!data/reference' ':!data/checks'`) in /tmp/before, with
    # empty Triton and Inductor caches of its own and the bytecode its own device_setup.sh gave it:
    # until session 22 that compiled only the carried wheels, torch and Triton into the prefix (each
    # stage compiled the rest, the standard library and headroom included, in every process). The
    # FlashInfer JIT cache is shared: warm for both trees, as on a server.
    tools/device_flashinfer.sh --require || exit 1
    end=$((SECONDS + $1)); study=$2; shift 2
    if [ ! -d /tmp/before ]; then
        mkdir -p /tmp/before && tar -xf .site-gpu/tree-before.tar -C /tmp/before || exit 1
        rm -rf /tmp/triton-before /tmp/inductor-before /tmp/pycache-before
    fi
    export PYTHONPYCACHEPREFIX=/tmp/pycache-before
    if [ ! -f /tmp/pycache-before/.compiled ]; then
        mkdir -p /tmp/pycache-before
        python3 -m compileall -q -j 0 /tmp/site $(python3 -c "import os, torch, triton; print(os.path.dirname(torch.__file__), os.path.dirname(triton.__file__))") > /dev/null 2>&1
        touch /tmp/pycache-before/.compiled
    fi
    cd /tmp/before || exit 1
    export PYTHONPATH=/tmp/site:/tmp/before TRITON_CACHE_DIR=/tmp/triton-before TORCHINDUCTOR_CACHE_DIR=/tmp/inductor-before
    snakemake_for $((end - SECONDS)) "before-$study" "$study" -- "$@"
    ;;
gpu-tests)
    tools/device_flashinfer.sh --require || exit 1
    export TRITON_CACHE_DIR=/tmp/triton-tests TORCHINDUCTOR_CACHE_DIR=/tmp/inductor-tests
    start=$SECONDS
    timeout -s INT "${1:-360}" python3 -m pytest -m gpu -q -ra -p no:cacheprovider -rP \
        > "$OUT/gpu_tests.txt" 2>&1
    echo "pytest -m gpu exit $? after $((SECONDS - start)) s" | tee -a "$OUT/gpu_tests.txt"
    grep -E "held-out|heldout" "$OUT/gpu_tests.txt" | tail -5
    tail -8 "$OUT/gpu_tests.txt"
    ;;
*)
    echo "device_session.sh: unknown mode $mode (pieces, jit, study, ab, before, gpu-tests)" >&2
    exit 2
    ;;
esac
