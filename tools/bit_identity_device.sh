#!/usr/bin/env bash
# Bit identity of the kernel move on one H200, in one device call (about a minute with compiles):
# tools/bit_identity.py on the recorded kernels (BEFORE: a folder holding a copy of the base
# commit's kernels/, default .before, git-ignored) and on this tree's kernels/, side by side
# (8 compile/launch workers each), then --compare. Writes to $OUT:
#   bit_identity_before.json, bit_identity_after.json, bit_identity_compare.txt
# Exit status: 0 when every case's output, launches and TTGIR/PTX hashes agree, else 1.
#   git worktree add /tmp/base <base-commit> && cp -r /tmp/base/kernels .before/   # once, by hand
#   bash tools/bit_identity_device.sh .before
set -euo pipefail
before=${1:-.before}
: "${OUT:?set OUT to the folder the results go to}"
if [ ! -f "$before/kernels/__init__.py" ]; then
    echo "bit_identity_device.sh: $before/kernels/__init__.py not found (copy the base commit's kernels/ there)" >&2
    exit 2
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}  # keep a wheelhouse --target on the path
unset TRITON_INTERPRET
start=$SECONDS
python3 tools/bit_identity.py write "$OUT/bit_identity_before.json" --root "$before" --device cuda --jobs 8 &
before_pid=$!
python3 tools/bit_identity.py write "$OUT/bit_identity_after.json" --root . --device cuda --jobs 8
wait "$before_pid"
echo "both trees written in $((SECONDS - start)) s"
python3 tools/bit_identity.py --compare "$OUT/bit_identity_before.json" "$OUT/bit_identity_after.json" \
    | tee "$OUT/bit_identity_compare.txt"
