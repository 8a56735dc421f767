#!/usr/bin/env bash
# The virtual environment, in two parts (the Makefile's stamps make each run once):
#
#   scripts/setup.sh demo PYTHON VENV PLUGIN...    `make setup`: what the main job needs (plugins/*)
#   scripts/setup.sh all PYTHON VENV CONTRIB...    `make setup-all`: the rest, for `make test` (contrib/*)
#
# `demo` creates the venv and installs torch (the pin in constraints.txt), core with its `examples` extra
# (scikit-learn) and the first-party plugins, all editable. `all` adds core's
# `test` and `lightning` extras (pytest, mypy, ruff, the docs toolchain, MLflow, W&B), the engines under contrib/ (Ray, hivemind,
# torchft, ...), Horovod's build, and the system packages. Two jobs run in the background while pip fills the venv,
# since none of the three uses what the others install: scripts/system-deps.sh (apt-get for SLURM, munge, Open MPI;
# on a fresh machine mostly waiting on downloads) and Horovod's build (about 2 minutes of both cores, against the
# torch that `demo` installed; the wheel is installed at the end). Each one's output is printed when it ends, and a
# failure of any fails the setup.
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
    background_logs=() background_pids=() background_names=()
    # NAME COMMAND...: run COMMAND in the background, in a process group of its own (so that a failure here can stop
    # it whole: Horovod's build runs pip, cmake and make), its output kept for the end.
    start_background() {
        local name=$1 log
        shift
        log=$(mktemp -t "core-$name.XXXXXX")
        setsid "$@" >"$log" 2>&1 &
        background_pids+=("$!") background_logs+=("$log") background_names+=("$name")
    }
    # NAME [stopped]: wait for that background job, show its output, and fail the setup if it failed.
    wait_for() {
        local index job_status
        for index in "${!background_names[@]}"; do
            [ "${background_names[$index]}" = "$1" ] || continue
            if wait "${background_pids[$index]}"; then job_status=0; else job_status=$?; fi
            sed "s/^/[$1] /" "${background_logs[$index]}"
            rm -f "${background_logs[$index]}"
            unset "background_pids[$index]" "background_logs[$index]" "background_names[$index]"
            if [ "$job_status" -ne 0 ]; then
                if [ "${2:-}" = stopped ]; then
                    echo "setup: stopped the background job '$1' (the setup failed)" >&2
                else
                    echo "setup: the background job '$1' failed (exit $job_status); its output is above" >&2
                fi
                return "$job_status"
            fi
        done
    }
    # Whatever ends this script (an error included) waits for the background jobs and shows what they said: an apt
    # killed half-way would leave dpkg locked and the packages half-installed. Horovod's build is stopped instead
    # when the script failed (it writes its wheel only at the end, so a stopped build leaves no wheel behind).
    finish() {
        local status=$? index name job_status how=
        if [ "$status" -ne 0 ]; then
            how=stopped
            for index in "${!background_pids[@]}"; do
                if [ "${background_names[$index]}" = horovod ]; then
                    kill -TERM -- "-${background_pids[$index]}" 2>/dev/null || true
                fi
            done
        fi
        for name in "${background_names[@]}"; do
            job_status=0
            wait_for "$name" "$([ "$name" = horovod ] && echo "$how")" || job_status=$?
            [ "$status" -ne 0 ] || status=$job_status
        done
        exit "$status"
    }
    trap finish EXIT
    # A signal (Ctrl-C, a CI job cancelled) ends the script through finish too: the build runs in a session of its
    # own, which the terminal's signal does not reach.
    trap 'exit 130' INT
    trap 'exit 143' TERM
    if [ -x scripts/system-deps.sh ]; then start_background system-deps scripts/system-deps.sh; fi
    # Horovod has no wheel for torch 2.x: core-horovod builds its sdist once (C++17, -O0) and caches the wheel. Its
    # installer runs as a plain script (standard library only), before pip has installed core-horovod; nothing pip
    # installs below replaces what the build reads (torch and its requirements, setuptools).
    horovod_installer=contrib/core-horovod/core_horovod/install.py
    if [ -f "$horovod_installer" ]; then
        start_background horovod "$venv/bin/python" "$horovod_installer" --if-missing --build-only
    fi
    # Core again (editable, a few seconds) for its extras; the plugins from `demo` stay as they are. tests/test_litgpt.py
    # runs litgpt (a Fabric program, pinned in constraints.txt) unmodified through the `lightning` alias: what it
    # imports is here (huggingface-hub, tokenizers), litgpt itself comes next without its `lightning` requirement
    # (--no-deps). One pip run per set: each run costs seconds of reading the indexes.
    pip_install -e '.[examples,test,lightning]' "${editable[@]}" huggingface-hub tokenizers
    pip_install --no-deps litgpt
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
    # The build started above, then its wheel installed (seconds) by core-horovod, which pip has installed by now.
    if [ -f "$horovod_installer" ]; then
        wait_for horovod
        "$venv/bin/python" -m core_horovod.install --if-missing
    fi
    ;;
*)
    echo "usage: scripts/setup.sh demo|all PYTHON VENV DIST..." >&2
    exit 2
    ;;
esac
