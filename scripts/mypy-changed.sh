#!/usr/bin/env bash
# mypy on the given files with the project's settings (pre-commit passes the changed ones). A distribution's
# package is found through the editable install, so a file under plugins/ is checked as part of its package.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
    echo "mypy-changed: .venv is missing; run 'make setup' first" >&2
    exit 1
fi
exec .venv/bin/python -m mypy --follow-imports=silent "$@"
