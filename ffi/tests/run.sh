#!/usr/bin/env bash
# The C and C++ tests of the C ABI, in order:
#   1. include/kary_replay.h alone compiles as C11 and as C++17, and kary_replay.hpp as
#      C++17, with -Wall -Wextra -Werror -pedantic;
#   2. scripts/install-c.sh installs the package into a fresh prefix;
#   3. ffi/tests/c is built against it with CMake (find_package(KaryReplay CONFIG)), the
#      README's C++ example included, and the smoke test again through pkg-config;
#   4. each test runs natively, then under valgrind memcheck (zero errors, zero leaks).
# Installs cmake, valgrind, pkg-config, gcc and g++ with apt when they are missing.
set -euo pipefail
cd "$(dirname "$0")/../.."
out="${TMPDIR:-/tmp}/kary-replay-ffi-tests"
rm -rf "$out"
mkdir -p "$out"

# Tools from apt when missing (Debian package names).
missing=()
for pair in cmake:cmake valgrind:valgrind pkg-config:pkg-config gcc:gcc g++:g++ awk:gawk; do
  command -v "${pair%%:*}" >/dev/null || missing+=("${pair#*:}")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing with apt: ${missing[*]}"
  if [ "$(id -u)" = 0 ]; then sudo=""; else sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

echo "--- 1. header-only translation units"
flags=(-Wall -Wextra -Werror -pedantic -Iinclude -c)
gcc -std=c11 "${flags[@]}" -x c ffi/tests/c/header_only.c -o "$out/header_only_c.o"
g++ -std=c++17 "${flags[@]}" -x c++ ffi/tests/c/header_only.c -o "$out/header_only_cpp.o"
printf '#include "kary_replay.hpp"\n' >"$out/hpp_only.cpp"
g++ -std=c++17 "${flags[@]}" "$out/hpp_only.cpp" -o "$out/hpp_only.o"
echo "kary_replay.h compiles alone as C11 and C++17, kary_replay.hpp as C++17"

echo "--- 2. install"
scripts/install-c.sh "$out/prefix"

echo "--- 3. build against the installed package"
# The README's C++ example: the block between the two markers.
awk '/<!-- cpp-example:begin -->/{on=1; next} /<!-- cpp-example:end -->/{on=0} on' README.md |
  sed '/^```/d' >"$out/readme_example.cpp"
[ -s "$out/readme_example.cpp" ] || { echo "README.md has no C++ example between the markers" >&2; exit 1; }
cmake -S ffi/tests/c -B "$out/build" -DCMAKE_PREFIX_PATH="$out/prefix" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DREADME_EXAMPLE="$out/readme_example.cpp" >/dev/null
cmake --build "$out/build" -j 2 >/dev/null
export PKG_CONFIG_PATH="$out/prefix/lib/pkgconfig"
gcc -std=c11 -Wall -Wextra -Werror -pedantic ffi/tests/c/smoke.c -o "$out/smoke_pkgconfig" \
  $(pkg-config --cflags --libs kary_replay) -lm
echo "built: smoke (shared), smoke_static, errors, threaded, shards, shards_cpp, rate, rate_cpp, sequence, sequence_cpp, shm, shm_cpp, sequence_shm, sequence_shm_cpp, readme_example (CMake); smoke_pkgconfig"

echo "--- 4. run, then under valgrind memcheck"
cd "$out"
LD_LIBRARY_PATH="$out/prefix/lib" ./smoke_pkgconfig
for t in smoke smoke_static errors threaded shards shards_cpp rate rate_cpp sequence sequence_cpp shm shm_cpp sequence_shm sequence_shm_cpp readme_example; do
  "build/$t"
done
vg=(valgrind -q --error-exitcode=99 --leak-check=full --show-leak-kinds=definite,indirect
  --errors-for-leak-kinds=definite,indirect --fair-sched=yes)
# The canary leaks a buffer on purpose: valgrind must report it, or its silence means nothing.
status=0
"${vg[@]}" build/leak_canary >/dev/null 2>"$out/canary.log" || status=$?
if [ "$status" != 99 ] || ! grep -q "definitely lost" "$out/canary.log"; then
  echo "valgrind did not report the canary's deliberate leak (exit $status)" >&2
  cat "$out/canary.log" >&2
  exit 1
fi
echo "valgrind reports the canary's deliberate leak (exit 99), so it is watching"
for t in smoke smoke_static errors shards shards_cpp rate sequence readme_example; do
  "${vg[@]}" "build/$t" >/dev/null
  echo "valgrind $t: 0 errors, 0 leaks"
done
"${vg[@]}" build/rate_cpp 2000 >/dev/null
echo "valgrind rate_cpp: 0 errors, 0 leaks"
"${vg[@]}" build/threaded 0.05 >/dev/null
echo "valgrind threaded: 0 errors, 0 leaks"
"${vg[@]}" build/sequence_cpp 300 >/dev/null
echo "valgrind sequence_cpp: 0 errors, 0 leaks"
"${vg[@]}" build/shm quick >/dev/null
"${vg[@]}" build/shm_cpp quick >/dev/null
"${vg[@]}" build/sequence_shm quick >/dev/null
"${vg[@]}" build/sequence_shm_cpp quick >/dev/null
echo "valgrind shm, shm_cpp, sequence_shm, sequence_shm_cpp: 0 errors, 0 leaks"
echo "C ABI tests passed"
