#!/usr/bin/env bash
# The virtual environment, in two parts (the Makefile's stamps make each run once):
#
#   scripts/setup.sh demo PYTHON VENV PLUGIN...    `make setup`: what the main job needs (plugins/*)
#   scripts/setup.sh all PYTHON VENV CONTRIB...    `make setup-all`: the rest, for `make test` (contrib/*)
#
# `demo` creates the venv and installs torch (the pin in constraints.txt), core with its `examples` extra
# (scikit-learn) and the first-party plugins, all editable. `all` adds core's
# `test` and `lightning` extras (pytest, mypy, ruff, the docs toolchain, MLflow, W&B), the engines under contrib/ (Ray, hivemind,
# torchft, ...), Horovod's build, and the system packages: scripts/system-deps.sh (apt-get for SLURM, munge,
# Open MPI) runs in the background while pip fills the venv, since neither uses the other and on a fresh machine
# both mostly wait on downloads. Its output is printed when it ends, and a failure of either fails the setup.
set -euo pipefail

part=$1 python=$2 venv=$3
shift 3
pip=("$venv/bin/python" -m pip)

# setuptools prints a 12-line "Editable installation" notice per distribution, which buried the warnings worth
# reading; only that notice is silenced, by its message. The editable installs build with the venv's setuptools
# (the build-system's requirement, installed first): an isolated build environment per distribution cost about
# 95 s of the setup for 22 distributions.
pip_install() {
    PYTHONWARNINGS="ignore:Editable installation" \
        "${pip[@]}" install --quiet --no-build-isolation -c constraints.txt "$@"
}
editable=()
for dist in "$@"; do editable+=(-e "$dist"); done

case $part in
demo)
    test -x "$venv/bin/python" || "$python" -m venv "$venv"
    # The build backend first: the editable installs below build with the venv's setuptools.
    "${pip[@]}" install --quiet --upgrade pip 'setuptools>=77'
    # torch from the pin in constraints.txt (an unpinned resolve would pull CUDA wheels), in the same resolve as the
    # rest: one pip run costs a few seconds of index reading on its own. --no-compile: pip's byte-compiling of every
    # module it installs was most of the CPU time here (torch's alone: 26 s with it, 7 s without); the demo's
    # imports compile what they use, and `all` compiles the rest before the tests.
    pip_install --no-compile torch -e '.[examples]' "${editable[@]}"
    ;;
all)
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
    # Core again (editable, a few seconds) for its extras; the plugins from `demo` stay as they are.
    pip_install -e '.[examples,test,lightning]' "${editable[@]}"
    # tests/test_litgpt.py runs litgpt (a Fabric program, pinned in constraints.txt) unmodified through the
    # `lightning` alias: litgpt without its `lightning` requirement (--no-deps), then the rest of what it imports.
    pip_install --no-deps litgpt
    pip_install huggingface-hub tokenizers
    # Horovod has no wheel for torch 2.x: core-horovod builds its sdist once (C++17, -O1) and caches the wheel.
    if [ -d contrib/core-horovod ]; then "$venv/bin/python" -m core_horovod.install --if-missing; fi
    # What `demo` installed uncompiled (torch, scipy, ...), compiled once for the test processes; like pip, a file
    # that does not compile (some packages ship templates and Python 2 examples) is left as it is.
    site_packages=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    "$venv/bin/python" -m compileall -q -j 0 "$site_packages" >/dev/null || true
    # This clone's own modules too (core, the plugins and contrib are editable installs, so their bytecode lives
    # here): where PYTHONDONTWRITEBYTECODE is set, as on the CI machine, no process writes it, and each of the
    # suite's ~1000 processes compiled what it imported of core from source (0.15 s each, measured with core.lite,
    # core.trainer, core.lightning, core_ddp and core_fsdp). Python checks each file's bytecode against the source,
    # so an edit later is read from the source as before.
    "$venv/bin/python" -m compileall -q -j 0 core plugins contrib bench examples scripts tests >/dev/null || true
    ;;
*)
    echo "usage: scripts/setup.sh demo|all PYTHON VENV DIST..." >&2
    exit 2
    ;;
esac
