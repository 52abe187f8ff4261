#!/usr/bin/env bash
# Checks and tests: Vagrantfile syntax, ruff, mypy (and --strict on the transport cores,
# topologies and the process records), the layer contract, the docs site (mkdocs build
# --strict), then pytest (arguments pass through).
#   scripts/test.sh [pytest args...]
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

ruby -c Vagrantfile
.venv/bin/ruff check .
.venv/bin/mypy
# mypy --strict on the parts held to it (as `make lint`; what they import is read, not reported)
.venv/bin/mypy --strict --follow-imports=silent transports/core transports/registry.py \
    transports/kernel.py transports/plan.py topologies workloads/records.py
.venv/bin/lint-imports --no-cache
bash scripts/docs.sh

status=0
.venv/bin/python -m pytest "$@" || status=$?

if [[ $status -eq 5 ]]; then
    echo "test.sh: FAILED: pytest collected no tests (exit 5); an empty run never counts as a pass." >&2
fi
exit "$status"
