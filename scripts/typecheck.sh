#!/usr/bin/env bash
# `make typecheck`: mypy over the packages, then over each test directory on its own, in parallel lanes.
#
#   TEST_MYPYPATH=... scripts/typecheck.sh PYTHON LANES PACKAGE... -- TEST_DIR...
#
# TEST_MYPYPATH is the MYPYPATH of the test directories' runs (the distributions' directories, where mypy finds
# their packages, and the helper scripts other plugins' tests import).
#
# The packages (core, bench, every distribution's) come first, in one run that fills the cache. The test
# directories cannot share one run: each has its own conftest.py, which its tests import as `conftest`. They run
# one at a time per lane, LANES lanes at once, each lane on its own copy of the cache the first run filled:
# two mypy runs sharing one cache at once reported errors that a serial run does not. On a cold cache (a fresh
# clone, as in CI) the first run costs about 35 s of CPU, mostly torch's stubs, and the 21 test directories about
# 45 s together (each run starts mypy and loads the cache again), which the lanes share out.
set -euo pipefail

python=$1 lanes=$2
shift 2
packages=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do packages+=("$1"); shift; done
[ $# -gt 0 ] && shift
test_dirs=("$@")

"$python" -m mypy "${packages[@]}"

cache=${MYPY_CACHE_DIR:-.mypy_cache}
logs=$(mktemp -d -t core-typecheck.XXXXXX)
trap 'rm -rf "$logs"' EXIT
pids=()
for ((lane = 0; lane < lanes; lane++)); do
    lane_cache=$cache/lanes/$lane
    rm -rf "$lane_cache"
    mkdir -p "$lane_cache"
    for entry in "$cache"/*; do
        [ "$entry" = "$cache/lanes" ] || cp -a "$entry" "$lane_cache/"
    done
    (
        status=0
        for ((index = lane; index < ${#test_dirs[@]}; index += lanes)); do
            dir=${test_dirs[$index]}
            if MYPY_CACHE_DIR=$lane_cache MYPYPATH=${TEST_MYPYPATH:-} "$python" -m mypy "$dir" >"$logs/$index" 2>&1; then :; else
                status=1
                echo "mypy $dir failed" >>"$logs/$index"
            fi
        done
        exit "$status"
    ) &
    pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
# Each directory's output, in the order of the list, once every lane is done.
for ((index = 0; index < ${#test_dirs[@]}; index++)); do
    sed "s|^Success: |${test_dirs[$index]}: |" "$logs/$index"
done
exit "$status"
