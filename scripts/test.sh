#!/usr/bin/env bash
# Checks and tests: Vagrantfile syntax, ruff, mypy (and --strict on the transport cores,
# topologies and the process records), the layer contract, the docs site (mkdocs build
# --strict), then pytest: with arguments, as given; without, the root tests and then the
# unit tests on two workers.
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

# pytest; exit 5 (nothing collected) never counts as a pass
run_pytest() {
    local rc=0
    .venv/bin/python -m pytest "$@" || rc=$?
    if [[ $rc -eq 5 ]]; then
        echo "test.sh: FAILED: pytest collected no tests (exit 5) from: $*" >&2
    fi
    return "$rc"
}

status=0
if [[ $# -gt 0 ]]; then
    run_pytest "$@" || status=$?
else
    # The root tests one at a time (each builds fabrics and some measure on them), then the
    # tests without root on two workers: they share no state, only the CPU.
    run_pytest tests/root || status=$?
    run_pytest -n 2 tests/unit || { rc=$?; [[ $status -ne 0 ]] || status=$rc; }
fi
exit "$status"
