#!/usr/bin/env bash
# Build an offline wheelhouse on a connected machine for a GPU host that has no network.
#
# The host already has torch, numpy, pandas, pyarrow, ... (tools/wheelhouse-host-packages.txt);
# the pipeline also needs snakemake, blake3 and duckdb and their dependency closure. This resolves
# that closure for the *target* Python and platform (not this machine's), builds pure-Python wheels
# for dependencies published only as sdists, drops what the host already has, and checks that the
# result is closed and holds exactly one version of each package (tools/wheelhouse_check.py).
#
# Usage: tools/wheelhouse.sh [options] [REQUIREMENT ...]
#   --python-version X.Y  target Python (default 3.12; env WHEELHOUSE_PYTHON_VERSION)
#   --glibc 2.N           newest manylinux glibc the host accepts (default 2.28; env WHEELHOUSE_GLIBC)
#   --arch ARCH           target machine (default x86_64; env WHEELHOUSE_ARCH)
#   --platform TAG        explicit pip platform tag, repeatable (replaces the --glibc/--arch list)
#   --out DIR             output folder (default .whl; env WHEELHOUSE_OUT); its *.whl are replaced
#   --have FILE|none      packages the host has (default tools/wheelhouse-host-packages.txt)
#   --keep NAME           ship NAME even though the host has it (repeatable; e.g. a too-old one).
#                         Always kept: packaging (snakemake pins packaging<26; a late-2026 host
#                         likely has 26.x) and typing-extensions (pydantic needs >=4.16, maybe newer
#                         than the host's). Both are small and backwards compatible where it matters.
#   --no-pin-local        do not pin bare default names to the versions installed here
#   --max-total-bytes N   fail above this size (default 60000000: the device tool carries 64 MiB)
#   --flashinfer          also carry FlashInfer: download pyproject.toml's `flashinfer` extra (pinned
#                         wheels, no dependencies: docs/airgapped.md) for the target into OUT/flashinfer/,
#                         check them, pack them in one tar and cut it into pieces (tools/pieces.sh)
#   --flashinfer-only     only that (the main wheelhouse is already built)
#   --pieces-out DIR      where the FlashInfer pieces and their manifest go (default .site-gpu/flashinfer)
#   --piece-bytes N       largest piece (default 16000000: beside the tracked tree and the site archive
#                         in one 64 MiB transfer)
# REQUIREMENTs default to: snakemake blake3 duckdb, each pinned to the version installed on this
# machine when there is one, so the GPU host runs what CI runs (a DuckDB catalog written there
# must open here).
# Env WHEELHOUSE_PIP_PYTHON: the interpreter that runs pip (default python3).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
py="${WHEELHOUSE_PIP_PYTHON:-python3}"
python_version="${WHEELHOUSE_PYTHON_VERSION:-3.12}"
glibc="${WHEELHOUSE_GLIBC:-2.28}"
arch="${WHEELHOUSE_ARCH:-x86_64}"
out="${WHEELHOUSE_OUT:-.whl}"
have="$here/wheelhouse-host-packages.txt"
pin_local=1
max_total_bytes=60000000
flashinfer=0
pieces_out=.site-gpu/flashinfer
piece_bytes=16000000
platforms=()
keep=(packaging typing-extensions)
reqs=()
# Published on PyPI only as an sdist (pure Python): built here with `pip wheel --no-deps`.
# Others found while resolving are built the same way; this list just saves a resolver round.
sdist_only_known=(connection_pool)

die() { echo "wheelhouse.sh: $*" >&2; exit 2; }
while (($#)); do
  case "$1" in
    --python-version) python_version="${2:?--python-version needs a value}"; shift 2 ;;
    --glibc) glibc="${2:?--glibc needs a value}"; shift 2 ;;
    --arch) arch="${2:?--arch needs a value}"; shift 2 ;;
    --platform) platforms+=("${2:?--platform needs a value}"); shift 2 ;;
    --out) out="${2:?--out needs a value}"; shift 2 ;;
    --have) have="${2:?--have needs a file or 'none'}"; shift 2 ;;
    --keep) keep+=("${2:?--keep needs a name}"); shift 2 ;;
    --no-pin-local) pin_local=0; shift ;;
    --max-total-bytes) max_total_bytes="${2:?--max-total-bytes needs a value}"; shift 2 ;;
    --flashinfer) flashinfer=1; shift ;;
    --flashinfer-only) flashinfer=2; shift ;;
    --pieces-out) pieces_out="${2:?--pieces-out needs a value}"; shift 2 ;;
    --piece-bytes) piece_bytes="${2:?--piece-bytes needs a value}"; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) reqs+=("$1"); shift ;;
  esac
done
[[ "$python_version" =~ ^3\.[0-9]+$ ]] || die "--python-version must look like 3.12, got '$python_version'"
[[ "$have" == none || -f "$have" ]] || die "--have: no such file '$have' (or pass --have none)"
abi="cp${python_version/./}"

if ((${#reqs[@]} == 0)); then
  for name in snakemake blake3 duckdb; do
    version=""
    if ((pin_local)); then
      version="$("$py" -c 'import importlib.metadata as m, sys
try: print(m.version(sys.argv[1]))
except m.PackageNotFoundError: pass' "$name")"
    fi
    reqs+=("$name${version:+==$version}")
  done
fi
if ((${#platforms[@]} == 0)); then
  mapfile -t platforms < <("$py" -c 'import sys; sys.path.insert(0, sys.argv[1])
from wheelhouse_check import manylinux_platforms
print("\n".join(manylinux_platforms(sys.argv[2], sys.argv[3])))' "$here" "$glibc" "$arch")
fi
platform_args=()
for p in "${platforms[@]}"; do platform_args+=(--platform "$p"); done

stage="$(mktemp -d "${TMPDIR:-/tmp}/wheelhouse.XXXXXX")"
trap 'rm -rf "$stage"' EXIT

build_flashinfer() {
  # Installed with pip --no-deps on the host: FlashInfer declares more (nvidia-cutlass-dsl,
  # cuda-python, nccl4py, ...) than its attention path needs, and the host lacks those.
  local fi_reqs=() fi_out="$out/flashinfer" root_args=() r
  mapfile -t fi_reqs < <("$py" -c 'import sys, tomllib
print("\n".join(tomllib.load(open(sys.argv[1], "rb"))["project"]["optional-dependencies"]["flashinfer"]))' \
    "$here/../pyproject.toml")
  ((${#fi_reqs[@]})) || die "pyproject.toml has no flashinfer extra"
  echo "== FlashInfer for CPython $python_version, ${platforms[0]}: ${fi_reqs[*]}"
  mkdir -p "$fi_out"
  rm -f "$fi_out"/*.whl
  "$py" -m pip download -q --no-deps --dest "$fi_out" --only-binary=:all: \
    --python-version "$python_version" --implementation cp --abi "$abi" --abi abi3 --abi none \
    "${platform_args[@]}" "${fi_reqs[@]}" || die "pip download of the FlashInfer wheels failed"
  for r in "${fi_reqs[@]}"; do root_args+=(--root "$r"); done
  "$py" "$here/wheelhouse_check.py" "$fi_out" "${root_args[@]}" --no-deps --python-version "$python_version" \
    "${platform_args[@]}" --max-total-bytes 0 || die "the FlashInfer wheels in $fi_out do not fit the target"
  # A reproducible tar (names sorted, no times or owners): the same wheels give the same pieces.
  tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf "$stage/flashinfer.tar" -C "$fi_out" .
  "$here/pieces.sh" split "$stage/flashinfer.tar" "$pieces_out" --piece-bytes "$piece_bytes"
  cat <<EOF

== FlashInfer ready: $(cd "$pieces_out" && pwd) (its pieces and flashinfer.tar.manifest.tsv)
Carry the manifest and some pieces in each call of one machine lease, as .site-gpu/flashinfer/;
'source tools/device_setup.sh' stashes them under /tmp/pieces/flashinfer and installs FlashInfer
into /tmp/site in the call that brings the last one (docs/airgapped.md, "FlashInfer"). Then check:
  python3 tools/wheelhouse_check.py --installed /tmp/flashinfer-wheels --no-deps ${root_args[*]}
EOF
}
if ((flashinfer == 2)); then
  build_flashinfer
  exit 0
fi
echo "== target: CPython $python_version, ${platforms[0]} (and older), roots: ${reqs[*]}"

build_sdist() {  # $1: requirement published only as an sdist; must give a pure-Python wheel
  local built_dir="$stage/sdist-build"
  rm -rf "$built_dir"
  "$py" -m pip wheel -q --no-deps --no-binary=:all: -w "$built_dir" "$1" \
    || die "pip wheel could not build '$1' from its sdist"
  compgen -G "$built_dir/*.whl" >/dev/null || die "pip wheel built nothing for '$1'"
  for whl in "$built_dir"/*.whl; do
    # A wheel built here is for this machine's Python; only a pure-Python one fits the target too.
    [[ "$whl" == *-none-any.whl ]] \
      || die "'$1' builds a platform wheel ($(basename "$whl")); build it on a machine like the host"
  done
  mv "$built_dir"/*.whl "$stage"/
  echo "   built from sdist: $1"
}

for req in "${sdist_only_known[@]}"; do build_sdist "$req"; done
built=" ${sdist_only_known[*]} "
for attempt in 1 2 3 4 5 6; do
  log="$stage/pip-download.log"
  # --find-links "$stage" lets the resolver use the wheels built from sdists above.
  if "$py" -m pip download --dest "$stage" --find-links "$stage" --only-binary=:all: \
       --python-version "$python_version" --implementation cp --abi "$abi" --abi abi3 --abi none \
       "${platform_args[@]}" "${reqs[@]}" >"$log" 2>&1; then
    break
  fi
  missing="$(grep -o 'No matching distribution found for [^ ]*' "$log" | awk '{print $NF}' | head -1)"
  if [[ -z "$missing" || "$built" == *" $missing "* || $attempt == 6 ]]; then
    cat "$log" >&2
    die "pip download failed (see above)"
  fi
  echo "   no wheel for '$missing' on the target: building it from its sdist"
  build_sdist "$missing"
  built+="$missing "
done

# Drop what the host already has (unless --keep), then let the checker prune anything unreachable
# (pip evaluates environment markers for *this* interpreter, so it can fetch extras) and verify.
norm() { local n="${1,,}"; n="${n//_/-}"; echo "${n//./-}"; }  # PEP 503 name, as in wheel names
if [[ "$have" != none ]]; then
  declare -A host_has=()
  while read -r name; do host_has["$(norm "$name")"]=1; done < <(sed 's/#.*//; s/[[:space:]]//g; /^$/d' "$have")
  for name in "${keep[@]}"; do key="$(norm "$name")"; unset "host_has[$key]"; done
  for whl in "$stage"/*.whl; do
    base="$(basename "$whl")"
    if [[ -n "${host_has[$(norm "${base%%-*}")]:-}" ]]; then echo "   host has it: $base"; rm -f "$whl"; fi
  done
fi

root_args=()
for r in "${reqs[@]}"; do root_args+=(--root "$r"); done
have_args=()
[[ "$have" != none ]] && have_args=(--have "$have")
"$py" "$here/wheelhouse_check.py" "$stage" "${root_args[@]}" "${have_args[@]+"${have_args[@]}"}" --python-version "$python_version" \
  "${platform_args[@]}" --max-total-bytes "$max_total_bytes" --prune \
  || die "the wheelhouse in $stage is not closed or not installable on the target (see above)"

mkdir -p "$out"
rm -f "$out"/*.whl
mv "$stage"/*.whl "$out"/
out_abs="$(cd "$out" && pwd)"
cat <<EOF

== wheelhouse ready: $out_abs ($(du -sh "$out" | cut -f1))
On the offline host (CPython $python_version, $arch), from the repository root with $out copied beside it:
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $out/*.whl
  export PYTHONPATH=/tmp/site:\$PWD PATH=/tmp/site/bin:\$PATH
  python3 tools/wheelhouse_check.py --installed $out ${root_args[*]}
EOF
if ((flashinfer)); then build_flashinfer; fi
