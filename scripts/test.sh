#!/usr/bin/env bash
# `make test`: lint, typecheck and the unit suite, each timed (wall, and the CPU of its processes).
#
#   scripts/test.sh MAKE PYTEST_WORKERS
#
# With PYTEST_WORKERS > 0, typecheck (one lane) runs in the background during the unit suite's parallel phase and is
# waited for before the serial phase starts: the parallel phase leaves part of the two cores idle (tests waiting on
# a timeout, a daemon, a rank's exit), mypy needs about 90 s of one core on a cold cache, and the serial tests
# depend on timing, so nothing may run beside them. typecheck's output is shown when it has ended. A failure of any
# phase fails the run; the serial phase runs only when the parallel phase and typecheck passed.
set -euo pipefail

make_command=$1 workers=$2
read -r -a make_run <<<"$make_command"

phase() {  # LABEL TARGET [VARIABLE=VALUE...]: run `make TARGET` and print its times under LABEL
    local label=$1
    shift
    TIMEFORMAT="[test] $label took %0R s (CPU %0U s user + %0S s system)"
    time "${make_run[@]}" "$@"
}

phase lint lint
if [ "$workers" = 0 ]; then
    phase typecheck typecheck
    phase unit unit
    exit 0
fi

log=$(mktemp -t core-typecheck.XXXXXX)
typecheck_pid=
finish() {
    local status=$?
    if [ -n "$typecheck_pid" ]; then  # the parallel phase failed: typecheck's outcome is still worth reading
        wait "$typecheck_pid" || true
        cat "$log"
    fi
    rm -f "$log"
    exit "$status"
}
trap finish EXIT
phase "typecheck (beside unit's parallel phase)" typecheck TYPECHECK_LANES=1 >"$log" 2>&1 &
typecheck_pid=$!
phase "unit, parallel phase" unit-parallel
typecheck_status=0
wait "$typecheck_pid" || typecheck_status=$?
typecheck_pid=
cat "$log"
if [ "$typecheck_status" -ne 0 ]; then
    echo "make test: typecheck failed (exit $typecheck_status); its output is above" >&2
    exit "$typecheck_status"
fi
phase "unit, serial phase" unit-serial
