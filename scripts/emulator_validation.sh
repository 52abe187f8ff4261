#!/usr/bin/env bash
# Runs the emulator experiments the explorer's model is validated against and keeps
# them as fixtures in explorer/data/emulator (as root; about 6 minutes on 2 cores):
#   sudo bash scripts/emulator_validation.sh
# Then `emu explore`'s tests and `emu bench explorer` predict each from the shipped
# calibration (a different run) and compare.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
EMU=.venv/bin/emu
PY=.venv/bin/python
TMP="$(mktemp -d /tmp/sae-validation.XXXXXX)"
trap 'rm -rf "$TMP"' EXIT

# Only this script's runs: a rerun replaces them all.
rm -rf explorer/data/emulator/val-*

run() {  # NAME EXPERIMENT [KEY=VALUE ...]
    local name=$1 file=$2
    shift 2
    local sets=()
    for kv in "$@"; do sets+=(--set "$kv"); done
    "$EMU" run "$file" --out "$TMP/$name" "${sets[@]}"
    "$PY" -m explorer.emulator_check capture "$TMP/$name" "$file" "$name" "$@"
}

for delay in 2 5 10; do
    for mb in 2 4 8; do
        run "val-lm-pipeline-2dc-d${delay}-m${mb}" experiments/validation/lm_pipeline_2dc.toml \
            "fabric.dci_delay_ms=${delay}.0" "workload.microbatches=${mb}"
    done
done
for delay in 2 20; do
    for coll in ring hierarchical; do
        run "val-lm-dp-2dc-d${delay}-${coll}" experiments/validation/lm_dp_2dc.toml \
            "fabric.dci_delay_ms=${delay}.0" "transport.collective=${coll}"
    done
done
run "val-lm-mrc-cut" experiments/validation/lm_mrc_cut.toml
