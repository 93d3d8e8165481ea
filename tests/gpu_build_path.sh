#!/bin/bash
# The GPU machine's set-up path, run as far as a CPU LibTorch allows, so that it does not rot
# between visits to a GPU: scripts/gather-deps.sh fills a dependency folder (Gloo's headers taken
# from this machine's libgloo-dev, no network), then scripts/build-gpu.sh configures against the
# LibTorch that Debian's python3 names, with the installed CLI11, nlohmann/json, GoogleTest and Gloo
# headers hidden so that each must come from the gathered folder, as on the GPU machine, and two
# files are compiled from it: the one that includes c10d's ProcessGroupGloo.hpp (Gloo's headers)
# and the command line (CLI11), at -O0: what is checked is that the headers are found and the code
# compiles, not the optimiser (31 s at -O3, 24 s at -O0 on the 2-core VM). Exit 77 (CTest's skip)
# without Debian's python3-torch or Gloo headers.
#   gpu_build_path.sh SOURCE_DIR
set -u
src=$1
py=/usr/bin/python3
if [ ! -f /usr/include/gloo/algorithm.h ]; then echo "skip: no system Gloo headers to gather"; exit 77; fi
if ! "$py" -c 'import torch' 2>/dev/null; then echo "skip: $py has no torch"; exit 77; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAILED: $*"; exit 1; }
cd "$src" || fail "no source folder $src"

DDPBENCH_GLOO_HEADERS=/usr/include/gloo ./scripts/gather-deps.sh "$tmp/deps" >"$tmp/gather.log" 2>&1 ||
  { cat "$tmp/gather.log"; fail "gather-deps.sh"; }
for need in include/CLI/CLI.hpp include/nlohmann/json.hpp include/gloo/algorithm.h googletest/CMakeLists.txt; do
  [ -e "$tmp/deps/$need" ] || fail "gather-deps.sh left out $need"
done

PYTHON=$py DDPBENCH_DEPS_DIR="$tmp/deps" DDPBENCH_BUILD_DIR="$tmp/build" DDPBENCH_CONFIGURE_ONLY=1 \
  ./scripts/build-gpu.sh -DCMAKE_DISABLE_FIND_PACKAGE_CLI11=ON -DCMAKE_DISABLE_FIND_PACKAGE_nlohmann_json=ON \
  -DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON -DDDPBENCH_GLOO_FROM_DEPS=ON -DDDPBENCH_USE_PCH=OFF -DCMAKE_CXX_FLAGS_RELEASE=-O0 \
  >"$tmp/configure.log" 2>&1 || { tail -n 30 "$tmp/configure.log"; fail "build-gpu.sh did not configure"; }
grep -q "^DDPBENCH_GLOO_INCLUDE_DIR:PATH=$tmp/deps/include$" "$tmp/build/CMakeCache.txt" ||
  fail "Gloo's headers were not taken from the gathered folder: $(grep DDPBENCH_GLOO_INCLUDE_DIR "$tmp/build/CMakeCache.txt")"
grep -q "googletest" "$tmp/build/CMakeCache.txt" || fail "GoogleTest was not built from the gathered sources"

for object in compat/c10d_compat.cpp cli/cli.cpp; do
  target="CMakeFiles/ddpbench_core.dir/$object.o"
  grep -q -- "-isystem $tmp/deps/include" <(ninja -C "$tmp/build" -t commands "$target" | tail -n 1) ||
    fail "$object is not compiled against the gathered headers"
  ninja -C "$tmp/build" "$target" >"$tmp/compile.log" 2>&1 || { tail -n 30 "$tmp/compile.log"; fail "$object"; }
done
echo "ok: gathered, configured through build-gpu.sh against $("$py" -c 'import torch; print(torch.__version__)') and compiled from the gathered folder alone"
