#!/usr/bin/env bash
# The VM's last provisioning step (see the Vagrantfile), as root inside the VM after
# scripts/setup.sh: record what the emulator uses on this kernel (`emu doctor`), check
# that a DCI link's delay goes through netem here (a 2-DC fabric under the automatic
# backend choice, pinged across), then run the quick reproduction. With "smoke" (the form
# that fits software emulation) the last part is the fabric check `emu demo --paths`.
#
#   sudo bash /vagrant/scripts/vagrant/in-vm.sh [reproduce|smoke] [OUT]
#
# OUT (default results/vagrant-reproduce, relative to the project) receives vm/ (doctor,
# netem check, kernel, CPU and memory, step durations) and reproduce/ (or demo-paths/).
set -euo pipefail

MODE="${1:-reproduce}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
OUT="${2:-results/vagrant-reproduce}"
EMU="$ROOT/.venv/bin/emu"
DCI_DELAY_MS=10 # one way; a ping across the DCI takes at least twice this

HERE="$ROOT/scripts/vagrant"
# shellcheck source=scripts/vagrant/common.sh
source "$HERE/common.sh"

case "$MODE" in
    reproduce | smoke) ;;
    *) die "mode $MODE is not valid: reproduce or smoke" ;;
esac
require_root "vagrant provision (or: sudo bash $0 $MODE)"
[[ -x "$EMU" ]] || die "$EMU is missing: scripts/setup.sh has not run"

# Each run starts from an empty directory (emu reproduce refuses to overwrite a report);
# this is the VM's own copy of the project, the host's results/ is never synced in.
rm -rf "$OUT"
mkdir -p "$OUT/vm"
VM="$OUT/vm"
TIMINGS="$VM/timings.tsv"
: >"$TIMINGS"

machine() {
    {
        echo "kernel: $(uname -r) ($(uname -v))"
        echo "debian: $(cat /etc/debian_version)"
        echo "cpus: $(nproc)"
        grep -m1 'model name' /proc/cpuinfo || true
        free -m
        df -h /
    } >"$VM/machine.txt"
    cat "$VM/machine.txt"
}

doctor() {
    local rc=0
    "$EMU" doctor | tee "$VM/doctor.txt" || rc=$?
    "$EMU" doctor --json >"$VM/doctor.json" || true
    return "$rc"
}

# A 2-DC fabric with the default (auto) delay backend: the CLI says which backend the DCI
# links got; the DCI routers' qdiscs and a ping across the DCI confirm it.
netem_check() {
    local log="$VM/netem-fabric.log" pid try qdiscs ok=1
    # Unbuffered: the CLI prints "fabric ... up" to stdout, a file here, then sleeps.
    PYTHONUNBUFFERED=1 "$EMU" fabric --dcs 2 --dci-delay-ms "$DCI_DELAY_MS" --name vmcheck \
        >"$log" 2>&1 &
    pid=$!
    for _ in $(seq 1 600); do # building takes a minute or more under emulation
        grep -q 'Ctrl-C tears it down' "$log" && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 1
    done
    if grep -q 'Ctrl-C tears it down' "$log"; then
        try="$(sed -n 's/^ *try: //p' "$log")"
        qdiscs="$(ip -all netns exec tc qdisc show 2>/dev/null | grep -E '^netns:|netem' || true)"
        {
            grep 'DCI links:' "$log" || echo "no DCI line in the fabric's output"
            echo "--- netem qdiscs in the fabric's namespaces:"
            grep -B1 netem <<<"$qdiscs" || echo "(none)"
            echo "--- $try (5 pings across the DCI, ${DCI_DELAY_MS} ms each way):"
            # shellcheck disable=SC2086 # the CLI's suggested command, split on purpose
            ${try/-c1/-c 5 -i 0.2} || echo "ping failed"
        } >"$VM/netem-check.txt" 2>&1
        grep -q 'via netem delay' "$log" || ok=0
        grep -q netem <<<"$qdiscs" || ok=0
    else
        ok=0
    fi
    kill -TERM "$pid" 2>/dev/null || true # the CLI tears the fabric down on SIGTERM
    wait "$pid" || true
    cat "$VM/netem-check.txt" 2>/dev/null || cat "$log"
    if ((ok)); then
        echo "netem check: DCI delay via netem (automatic backend choice)" | tee -a "$VM/netem-check.txt"
    else
        echo "netem check: FAILED: DCI delay did not go through netem (see $log)" |
            tee -a "$VM/netem-check.txt"
        return 1
    fi
}

main_run() {
    if [[ "$MODE" == reproduce ]]; then
        "$EMU" reproduce --quick --out "$OUT/reproduce"
    else
        "$EMU" demo --paths --out "$OUT/demo-paths"
    fi
}

status=0
try_step "vm: machine" machine
((STEP_RC == 0)) || status=1
try_step "vm: emu doctor" doctor
((STEP_RC == 0)) || status=1
try_step "vm: netem check (2-DC fabric, DCI ${DCI_DELAY_MS} ms)" netem_check
((STEP_RC == 0)) || status=1
if [[ "$MODE" == reproduce ]]; then
    try_step "vm: emu reproduce --quick" main_run
    ((STEP_RC == 0)) || status=1
else
    try_step "vm: emu demo --paths" main_run
    ((STEP_RC == 0)) || status=1
fi
echo "in-vm: step durations (seconds, exit status):"
sed 's/^/  /' "$TIMINGS"
exit "$status"
