#!/usr/bin/env bash
# C and C++ checks of include/kary_replay.h (so far: the header compiles alone as C11 and
# C++17 with every warning an error). More tests of the C ABI come with issue 4.
set -euo pipefail
cd "$(dirname "$0")/../.."
out="${TMPDIR:-/tmp}/kary-replay-ffi-tests"
mkdir -p "$out"
flags=(-Wall -Wextra -Werror -pedantic -Iinclude -c)
gcc -std=c11 "${flags[@]}" -x c ffi/tests/c/header_only.c -o "$out/header_only_c.o"
g++ -std=c++17 "${flags[@]}" -x c++ ffi/tests/c/header_only.c -o "$out/header_only_cpp.o"
echo "header compiles as C11 and C++17 (-Wall -Wextra -Werror -pedantic)"
