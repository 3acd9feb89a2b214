#!/usr/bin/env bash
# Carry a file larger than one transfer in pieces of bounded size, and join them back on the far side.
#
# Usage:
#   tools/pieces.sh split FILE DIR [--piece-bytes N]
#       Cut FILE into DIR/NAME.part-000, NAME.part-001, ... of at most N bytes (default 16000000) and
#       write DIR/NAME.manifest.tsv: kind (piece|whole), name, bytes and SHA-256 of each piece, in join
#       order, and of the whole. Earlier pieces of NAME in DIR are removed first.
#   tools/pieces.sh stash SRC DEST
#       Check the pieces carried in SRC against SRC's manifest and copy them and the manifest to DEST,
#       where pieces carried by earlier transfers accumulate. Prints how many DEST holds. Exit 0 when
#       DEST holds them all, 3 when some are still to come, 1 on a corrupt piece or another archive's
#       manifest in DEST.
#   tools/pieces.sh join DIR OUT
#       Check every piece in DIR against DIR's manifest, concatenate them to OUT and check the whole.
#       Exit 1 with one line naming the first missing or corrupt piece.
# DIR, SRC and DEST each hold one *.manifest.tsv. Only coreutils: split, sha256sum, stat, cat.
#
# Why 16 MB: one transfer to our offline GPU host carries 64 MiB (67.1 MB), and it also carries the
# tracked tree (at most 23 MiB, tests/tools/test_restore_reference.py) and the 25.6 MB site archive.
set -euo pipefail
shopt -s nullglob

die() { echo "pieces.sh: $*" >&2; exit 1; }
usage() { echo "pieces.sh: $*" >&2; echo "usage: tools/pieces.sh split FILE DIR [--piece-bytes N] | stash SRC DEST | join DIR OUT" >&2; exit 2; }
sha256() { sha256sum "$1" | cut -d' ' -f1; }

manifest_in() {  # $1: folder; prints its one manifest's path
  local found=("$1"/*.manifest.tsv)
  ((${#found[@]} == 1)) || die "expected one manifest (*.manifest.tsv) in $1, found ${#found[@]}"
  echo "${found[0]}"
}

rows() {  # $1: manifest, $2: kind; prints "name bytes sha256" per row of that kind, in order
  awk -F'\t' -v kind="$2" 'NR > 1 && $1 == kind { print $2, $3, $4 }' "$1"
}

check_piece() {  # $1: folder, $2: name, $3: bytes, $4: sha256; exit 3 when absent, 1 when corrupt
  local path="$1/$2" size sum
  [[ -f "$path" ]] || return 3
  size="$(stat -c %s "$path")"
  [[ "$size" == "$3" ]] || { echo "corrupt piece $2 in $1: $size bytes, the manifest says $3"; return 1; }
  sum="$(sha256 "$path")"
  [[ "$sum" == "$4" ]] || { echo "corrupt piece $2 in $1: sha256 $sum, the manifest says $4"; return 1; }
}

cmd_split() {
  local file="" dir="" piece_bytes=16000000
  while (($#)); do
    case "$1" in
      --piece-bytes) piece_bytes="${2:?--piece-bytes needs a value}"; shift 2 ;;
      -*) usage "unknown option $1" ;;
      *) if [[ -z "$file" ]]; then file="$1"; elif [[ -z "$dir" ]]; then dir="$1"; else usage "extra argument $1"; fi; shift ;;
    esac
  done
  [[ -n "$dir" ]] || usage "split needs FILE and DIR"
  [[ -f "$file" ]] || die "no such file: $file"
  [[ "$piece_bytes" =~ ^[1-9][0-9]*$ ]] || die "--piece-bytes must be a positive integer, got '$piece_bytes'"
  local name manifest piece
  name="$(basename "$file")"
  manifest="$dir/$name.manifest.tsv"
  mkdir -p "$dir"
  rm -f "$dir/$name".part-* "$manifest"
  # -d -a 3: numeric suffixes 000..999 (split fails if more are needed).
  split --bytes="$piece_bytes" --numeric-suffixes --suffix-length=3 "$file" "$dir/$name.part-"
  {
    printf 'kind\tname\tbytes\tsha256\n'
    for piece in "$dir/$name".part-*; do
      printf 'piece\t%s\t%s\t%s\n' "$(basename "$piece")" "$(stat -c %s "$piece")" "$(sha256 "$piece")"
    done
    printf 'whole\t%s\t%s\t%s\n' "$name" "$(stat -c %s "$file")" "$(sha256 "$file")"
  } >"$manifest.tmp"
  mv "$manifest.tmp" "$manifest"
  echo "pieces.sh: $name ($(stat -c %s "$file") bytes) -> $(rows "$manifest" piece | wc -l) pieces of at most $piece_bytes bytes in $dir"
}

cmd_stash() {
  (($# == 2)) || usage "stash needs SRC and DEST"
  local src="$1" dest="$2" manifest name bytes sum problem have=0 total=0 missing=()
  manifest="$(manifest_in "$src")"
  mkdir -p "$dest"
  if [[ -f "$dest/$(basename "$manifest")" ]]; then
    cmp -s "$manifest" "$dest/$(basename "$manifest")" \
      || die "$dest holds pieces of another $(basename "$manifest" .manifest.tsv) (its manifest differs): remove $dest"
  else
    local others=("$dest"/*.manifest.tsv)
    ((${#others[@]} == 0)) || die "$dest holds the pieces of $(basename "${others[0]}" .manifest.tsv): stash elsewhere"
  fi
  while read -r name bytes sum; do
    total=$((total + 1))
    if [[ -f "$src/$name" ]]; then
      problem="$(check_piece "$src" "$name" "$bytes" "$sum")" || die "$problem"
      [[ -f "$dest/$name" ]] && cmp -s "$src/$name" "$dest/$name" || { cp "$src/$name" "$dest/$name.tmp" && mv "$dest/$name.tmp" "$dest/$name"; }
    fi
    if [[ -f "$dest/$name" ]]; then have=$((have + 1)); else missing+=("$name"); fi
  done < <(rows "$manifest" piece)
  cp "$manifest" "$dest/"
  if ((${#missing[@]})); then
    echo "pieces.sh: $have of $total pieces in $dest; still to carry: ${missing[*]}"
    return 3
  fi
  echo "pieces.sh: all $total pieces in $dest"
}

cmd_join() {
  (($# == 2)) || usage "join needs DIR and OUT"
  local dir="$1" out="$2" manifest name bytes sum rc have total problem paths=()
  manifest="$(manifest_in "$dir")"
  total="$(rows "$manifest" piece | wc -l)"
  while read -r name bytes sum; do
    rc=0; problem="$(check_piece "$dir" "$name" "$bytes" "$sum")" || rc=$?
    if ((rc == 3)); then
      have=0
      while read -r name2 _; do [[ -f "$dir/$name2" ]] && have=$((have + 1)); done < <(rows "$manifest" piece)
      die "missing piece $name in $dir ($have of $total there): carry it and join again"
    fi
    ((rc == 0)) || die "$problem"
    paths+=("$dir/$name")
  done < <(rows "$manifest" piece)
  read -r name bytes sum < <(rows "$manifest" whole)
  [[ -n "${sum:-}" ]] || die "$manifest has no 'whole' row"
  cat "${paths[@]+"${paths[@]}"}" /dev/null >"$out.tmp"
  local got_bytes got_sum
  got_bytes="$(stat -c %s "$out.tmp")" got_sum="$(sha256 "$out.tmp")"
  if [[ "$got_bytes" != "$bytes" || "$got_sum" != "$sum" ]]; then
    rm -f "$out.tmp"
    die "the joined $name ($got_bytes bytes, sha256 $got_sum) is not the manifest's ($bytes, $sum)"
  fi
  mv "$out.tmp" "$out"
  echo "pieces.sh: joined $total pieces into $out ($bytes bytes, sha256 verified)"
}

(($#)) || usage "no command"
command="$1"; shift
case "$command" in
  split) cmd_split "$@" ;;
  stash) cmd_stash "$@" ;;
  join) cmd_join "$@" ;;
  -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' ;;
  *) usage "unknown command $command" ;;
esac
