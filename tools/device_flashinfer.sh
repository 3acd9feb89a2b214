#!/usr/bin/env bash
# On the offline GPU host: install FlashInfer, carried in pieces over consecutive calls of one machine
# lease (tools/wheelhouse.sh --flashinfer; docs/airgapped.md), into the site folder of the other
# carried wheels. tools/device_setup.sh runs it; it is safe to run again.
#
# Each call stashes the pieces it carries under /tmp/pieces/flashinfer (tools/pieces.sh stash: a
# corrupt piece fails here, naming it). The call that completes the set joins them, checks every
# piece's and the whole's SHA-256, and installs the wheels with `pip install --no-deps --target`.
# Until then it says which pieces are still to carry and succeeds, unless --require: then it fails
# with one line naming the first missing piece.
#
# Usage: tools/device_flashinfer.sh [--require] [--carried DIR] [--pieces DIR] [--site DIR]
#   --carried DIR  the pieces this call carries (default .site-gpu/flashinfer; absent: none)
#   --pieces DIR   where pieces accumulate between calls (default /tmp/pieces/flashinfer)
#   --site DIR     the install target, first on PYTHONPATH (default /tmp/site)
# The wheels stay in DIR's sibling flashinfer-wheels (/tmp/flashinfer-wheels) for
# `python3 tools/wheelhouse_check.py --installed /tmp/flashinfer-wheels --no-deps --root ...`.
set -euo pipefail
shopt -s nullglob

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
require=0 carried=.site-gpu/flashinfer pieces=/tmp/pieces/flashinfer site=/tmp/site
while (($#)); do
  case "$1" in
    --require) require=1; shift ;;
    --carried) carried="${2:?--carried needs a folder}"; shift 2 ;;
    --pieces) pieces="${2:?--pieces needs a folder}"; shift 2 ;;
    --site) site="${2:?--site needs a folder}"; shift 2 ;;
    *) echo "device_flashinfer.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -f "$site/.flashinfer" ]] && exit 0  # installed by an earlier call of this lease

if [[ -d "$carried" ]]; then
  rc=0
  "$here/pieces.sh" stash "$carried" "$pieces" || rc=$?
  ((rc == 0 || rc == 3)) || exit 1  # a corrupt piece: pieces.sh named it
  if ((rc == 3 && !require)); then exit 0; fi
fi
joined="$(dirname "$site")/flashinfer.tar" wheels="$(dirname "$site")/flashinfer-wheels"
"$here/pieces.sh" join "$pieces" "$joined" || exit 1  # one line naming the missing or corrupt piece
rm -rf "$wheels" && mkdir -p "$wheels"
tar -xf "$joined" -C "$wheels"
# Staged, then merged without overwriting: pip's --target into an existing folder skips (or, with
# --upgrade, replaces) a top-level folder that is already there, such as bin/.
stage="$(mktemp -d "$(dirname "$site")/flashinfer-stage.XXXXXX")"
trap 'rm -rf "$stage"' EXIT
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$stage" "$wheels"/*.whl
for f in "$stage"/bin/*; do
  if head -c 2 "$f" | grep -q '#!'; then sed -i '1s|^#!.*python.*$|#!/usr/bin/env python3|' "$f"; fi
done
mkdir -p "$site"
cp -a --no-clobber "$stage"/. "$site"/
(cd "$wheels" && ls -- *.whl) >"$site/.flashinfer"
rm -f "$joined"
echo "device_flashinfer.sh: installed into $site: $(tr '\n' ' ' <"$site/.flashinfer")"
