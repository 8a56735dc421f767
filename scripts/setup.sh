#!/usr/bin/env bash
# `make setup`: the virtual environment with torch, core and every distribution, and the system packages.
#
#   scripts/setup.sh PYTHON VENV DIST...     (the Makefile passes python3, .venv and plugins/*, contrib/*)
#
# The system packages (scripts/system-deps.sh: apt-get for SLURM, munge, Open MPI) install in the background
# while pip fills the venv: neither uses the other, and on a fresh machine both mostly wait on downloads. Its
# output is printed when it ends, and a failure of either fails the setup.
set -euo pipefail

python=$1 venv=$2
shift 2
pip=("$venv/bin/python" -m pip)

system_log=$(mktemp -t core-system-deps.XXXXXX)
system_pid=
if [ -x scripts/system-deps.sh ]; then
    scripts/system-deps.sh >"$system_log" 2>&1 &
    system_pid=$!
fi
# Whatever ends this script (an error included) waits for apt and shows what it said: an apt killed half-way
# would leave dpkg locked and the packages half-installed.
finish() {
    local status=$?
    if [ -n "$system_pid" ]; then
        if wait "$system_pid"; then system_status=0; else system_status=$?; fi
        sed 's/^/[system-deps] /' "$system_log"
        if [ "$system_status" -ne 0 ]; then
            echo "setup: scripts/system-deps.sh failed (exit $system_status); its output is above" >&2
            [ "$status" -ne 0 ] || status=$system_status
        fi
    fi
    rm -f "$system_log"
    exit "$status"
}
trap finish EXIT

test -x "$venv/bin/python" || "$python" -m venv "$venv"
"${pip[@]}" install --quiet --upgrade pip
# torch first, from the pin in constraints.txt: an unpinned resolve would pull CUDA wheels.
"${pip[@]}" install --quiet -c constraints.txt torch
# The editable installs build with the venv's setuptools (the build-system's requirement, installed first):
# an isolated build environment per distribution cost about 95 s of the setup for 22 distributions.
"${pip[@]}" install --quiet -c constraints.txt 'setuptools>=77'
editable=()
for dist in "$@"; do editable+=(-e "$dist"); done
# setuptools prints a 12-line "Editable installation" notice per distribution (21 of them here), which buried
# the warnings worth reading; only that notice is silenced, by its message.
PYTHONWARNINGS="ignore:Editable installation" \
    "${pip[@]}" install --quiet --no-build-isolation -c constraints.txt -e '.[test]' "${editable[@]}"
# Horovod has no wheel for torch 2.x: core-horovod builds its sdist once (C++17, -O1) and caches the wheel.
if [ -d contrib/core-horovod ]; then "$venv/bin/python" -m core_horovod.install --if-missing; fi
