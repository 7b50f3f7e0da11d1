#!/usr/bin/env bash
# Checks that the vendored Pingora crates are the pristine crates.io release plus the patch
# series: applies vendor/patches/*.patch, in the order of vendor/patches/series, to pristine
# pingora-core, pingora-proxy and pingora-http, and compares the result with vendor/ file by
# file (diff -r, nothing ignored). Exits non-zero, printing what differs, when a patch does not
# apply or the result is not the vendored tree.
#
#   bash vendor/check-patches.sh               check (CI runs this)
#   bash vendor/check-patches.sh --diff        print what the vendored tree has beyond the series,
#                                              as a patch to add to it (exit 1 if anything)
#   bash vendor/check-patches.sh --tree DIR    leave the series applied in DIR, a git repository
#                                              with one commit per patch, to edit
#   bash vendor/check-patches.sh --regenerate DIR
#                                              rewrite each patch's diff from its commit in DIR
#                                              (its header is kept)
#
# Pristine sources: the .crate files of crates.io, fetched by cargo itself (which checks them
# against the index's checksums) through a throwaway project; when cargo cannot reach crates.io,
# the commits of this repository's history that copied the crates verbatim.
# Needs git (git apply: unlike `patch`, it is there wherever the repository was cloned, and it
# refuses a patch that does not apply exactly) and tar; cargo for the crates.io route.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

version=0.9.1
crates=(pingora-core pingora-proxy pingora-http)
patches=vendor/patches

mode=check
dir=
case "${1:-}" in
  "") ;;
  --diff) mode=diff ;;
  --tree | --regenerate)
    mode=${1#--}
    dir=${2:?"$1 needs a directory"}
    ;;
  *)
    echo "usage: $0 [--diff | --tree DIR | --regenerate DIR]" >&2
    exit 2
    ;;
esac

say() { printf '%s\n' "$*" >&2; }

# The patch files named in the series, in order (comments and blank lines skipped); the series
# and the directory must agree, so that no patch is forgotten or applied twice.
series=()
while read -r name kind _; do
  case "$name" in "" | "#"*) continue ;; esac
  case "$kind" in
    behaviour | speed) ;;
    *)
      say "vendor/patches/series: $name: kind must be behaviour or speed, not '$kind'"
      exit 1
      ;;
  esac
  [ -f "$patches/$name" ] || { say "vendor/patches/series names $name, which is missing"; exit 1; }
  series+=("$name")
done <"$patches/series"
listed=" ${series[*]} "
for file in "$patches"/*.patch; do
  name=${file##*/}
  case "$listed" in
    *" $name "*) ;;
    *)
      say "$file is not in vendor/patches/series"
      exit 1
      ;;
  esac
done

if [ "$mode" = regenerate ]; then
  for name in "${series[@]}"; do
    commit=$(git -C "$dir" log --format=%H --grep="^$name\$" -n 1)
    [ -n "$commit" ] || { say "no commit named $name in $dir"; exit 1; }
    header=$(sed '/^diff --git /,$d' "$patches/$name")
    {
      printf '%s\n\n' "$header"
      git -C "$dir" diff --no-color --no-renames "$commit~" "$commit"
    } >"$patches/$name.new"
    mv "$patches/$name.new" "$patches/$name"
  done
  say "rewrote ${#series[@]} patches from $dir; now run: bash vendor/check-patches.sh"
  exit 0
fi

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

# Unpacks the pristine crates into $1/<crate>.
pristine_from_crates_io() {
  local out=$1 home=${CARGO_HOME:-$HOME/.cargo} crate file
  command -v cargo >/dev/null 2>&1 || return 1
  mkdir -p "$scratch/fetch/src"
  {
    printf '[package]\nname = "pristine-pingora"\nversion = "0.0.0"\nedition = "2021"\n\n'
    printf '[dependencies]\n'
    for crate in "${crates[@]}"; do printf '%s = "=%s"\n' "$crate" "$version"; done
  } >"$scratch/fetch/Cargo.toml"
  : >"$scratch/fetch/src/lib.rs"
  for crate in "${crates[@]}"; do
    file=$(ls "$home"/registry/cache/*/"$crate-$version.crate" 2>/dev/null | head -n 1) || true
    if [ -z "$file" ]; then
      # Only when a crate is not in cargo's cache yet: fetch downloads what is missing.
      (cd "$scratch/fetch" && cargo fetch --quiet) >&2 || return 1
      file=$(ls "$home"/registry/cache/*/"$crate-$version.crate" 2>/dev/null | head -n 1) || true
      [ -n "$file" ] || return 1
    fi
    tar -xzf "$file" -C "$out" || return 1
    mv "$out/$crate-$version" "$out/$crate"
  done
}

# The same from git history: the first commit that added each crate's Cargo.toml.orig copied
# the crate verbatim (needs a clone with that history).
pristine_from_git() {
  local out=$1 crate commit
  for crate in "${crates[@]}"; do
    commit=$(git log --diff-filter=A --format=%H -- "vendor/$crate/Cargo.toml.orig" | tail -n 1)
    [ -n "$commit" ] || return 1
    git archive "$commit" "vendor/$crate" | tar -x -C "$out" --strip-components=1 || return 1
    # History holds 0.9.1 only: no use once the series is carried to another release.
    grep -qx "version = \"$version\"" "$out/$crate/Cargo.toml" || return 1
  done
}

applied=$scratch/applied
mkdir -p "$applied"
if pristine_from_crates_io "$applied"; then
  source="crates.io"
else
  say "cargo could not fetch the crates from crates.io; using the verbatim copies in git history"
  rm -rf "$applied" && mkdir -p "$applied"
  pristine_from_git "$applied" || { say "no pristine $version crates found"; exit 1; }
  source="git history"
fi

# A repository of its own, so that git apply takes paths from here whatever repository the
# temporary directory is in, and so that --tree and --diff have commits to work from.
git_scratch() { git -C "$applied" -c user.name=check-patches -c user.email=check-patches@localhost "$@"; }
git_scratch init -q
git_scratch add -A
git_scratch commit -q -m "pristine $version ($source)"
for name in "${series[@]}"; do
  if ! git_scratch apply --whitespace=nowarn "$root/$patches/$name"; then
    say "FAIL: $name does not apply on top of the patches before it"
    if [ "$mode" = tree ] && [ ! -e "$dir" ]; then
      # Moving to a new release: the patches before it are applied and committed in $dir, to
      # carry the rest by hand (vendor/README.md, "Moving to the next Pingora release").
      mkdir -p "$(dirname "$dir")"
      mv "$applied" "$dir"
      say "the patches before it are applied in $dir, one commit each"
    fi
    exit 1
  fi
  git_scratch add -A
  git_scratch commit -q -m "$name"
done

if [ "$mode" = tree ]; then
  mkdir -p "$(dirname "$dir")"
  [ ! -e "$dir" ] || { say "$dir exists"; exit 1; }
  mv "$applied" "$dir"
  say "the series applied to pristine $version ($source) is in $dir, one commit per patch"
  exit 0
fi

if [ "$mode" = diff ]; then
  # The vendored tree over the applied series, staged in the scratch repository: a diff with
  # paths relative to vendor/, as the patches have them.
  for crate in "${crates[@]}"; do
    rm -rf "${applied:?}/$crate"
    cp -R "vendor/$crate" "$applied/$crate"
  done
  git_scratch add -A
  if git_scratch diff --cached --quiet; then
    say "the series gives the vendored tree: nothing to add"
    exit 0
  fi
  git_scratch diff --cached --no-color --no-renames
  exit 1
fi

status=0
for crate in "${crates[@]}"; do
  rm -rf "$applied/.git"
  if ! diff -r "$applied/$crate" "vendor/$crate" >"$scratch/$crate.diff"; then
    say "FAIL: vendor/$crate is not pristine $crate $version plus vendor/patches:"
    sed "s|$applied/||" "$scratch/$crate.diff" >&2
    status=1
  fi
done
if [ "$status" -eq 0 ]; then
  say "vendor/: pristine ${crates[*]} $version ($source) plus ${#series[@]} patches, exactly"
fi
exit "$status"
