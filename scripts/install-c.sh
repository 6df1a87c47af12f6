#!/usr/bin/env bash
# Build the C ABI (release) and install it for C and C++ users. One command:
#   scripts/install-c.sh [PREFIX]        (PREFIX defaults to /usr/local)
# It installs
#   PREFIX/include/kary_replay.h, kary_replay.hpp   (C header, C++17 wrapper)
#   PREFIX/lib/libkary_replay.a                    (static)
#   PREFIX/lib/libkary_replay.so{,.MAJOR,.VERSION}  (shared, SONAME libkary_replay.so.MAJOR)
#   PREFIX/lib/cmake/KaryReplay/                   (find_package(KaryReplay CONFIG))
#   PREFIX/lib/pkgconfig/kary_replay.pc            (pkg-config kary_replay)
# The package files locate the prefix relative to themselves, so the tree can be moved.
case "${1:-}" in -h | --help) sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;; esac
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
prefix="${1:-/usr/local}"
mkdir -p "$prefix"
prefix="$(cd "$prefix" && pwd)"
version="$(sed -n 's/^version = "\(.*\)"/\1/p' "$repo/ffi/Cargo.toml" | head -1)"
major="${version%%.*}"

cargo build --manifest-path "$repo/Cargo.toml" --release -p kary-replay-ffi
target_dir="$(cargo metadata --manifest-path "$repo/Cargo.toml" --format-version 1 --no-deps |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
built="$target_dir/release"

# `install -C` and `put` leave a file that is already up to date untouched (its timestamp
# too), so that re-running this does not make consumers' builds recompile.
put() {  # put SRC DEST: copy when the contents differ
  cmp -s "$1" "$2" || install -m 644 "$1" "$2"
}
install -d "$prefix/include" "$prefix/lib/cmake/KaryReplay" "$prefix/lib/pkgconfig"
install -C -m 644 "$repo/include/kary_replay.h" "$repo/include/kary_replay.hpp" "$prefix/include/"
install -C -m 644 "$built/libkary_replay_ffi.a" "$prefix/lib/libkary_replay.a"
install -C -m 755 "$built/libkary_replay_ffi.so" "$prefix/lib/libkary_replay.so.$version"
ln -sf "libkary_replay.so.$version" "$prefix/lib/libkary_replay.so.$major"
ln -sf "libkary_replay.so.$major" "$prefix/lib/libkary_replay.so"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
for f in KaryReplayConfig.cmake KaryReplayConfigVersion.cmake; do
  sed -e "s/@VERSION@/$version/g" -e "s/@MAJOR@/$major/g" "$repo/ffi/cmake/$f.in" >"$tmp/$f"
  put "$tmp/$f" "$prefix/lib/cmake/KaryReplay/$f"
done
sed -e "s/@VERSION@/$version/g" "$repo/ffi/cmake/kary_replay.pc.in" >"$tmp/kary_replay.pc"
put "$tmp/kary_replay.pc" "$prefix/lib/pkgconfig/kary_replay.pc"
echo "installed kary-replay $version C ABI into $prefix"
