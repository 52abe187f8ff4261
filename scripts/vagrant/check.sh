#!/usr/bin/env bash
# End-to-end check of the README's set-up in a Debian 12 VM (sudo make vagrant-check):
# boot the local box under libvirt, provision it with scripts/setup.sh, run the quick
# reproduction inside (scripts/vagrant/in-vm.sh: emu doctor, the netem check, then
# `emu reproduce --quick`), copy the report back to results/vagrant-reproduce/ and
# destroy the VM, on failure too. Every step's duration goes to timings.tsv there.
#
#   SAE_VAGRANT_BOX    the box (default scaleacross-emu/bookworm64; built when missing)
#   SAE_VM_RUN         reproduce | smoke; default: reproduce under kvm, smoke under qemu.
#                      smoke fits software emulation: set-up, emu doctor, a 2-DC fabric
#                      (the netem check) and `emu demo --paths` instead of the reproduction
#   SAE_VM_DRIVER      kvm | qemu (software emulation); default kvm, or qemu when this
#                      host's /dev/kvm is PVM (kvm_pvm), which cannot run a stock kernel
#   SAE_VM_TIMEOUT_S   limit on the last provisioning step (default 5400)
#   SAE_TIMEOUT_SCALE  readiness waits inside the VM (Vagrantfile: 1 under kvm, 20 under qemu)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
# shellcheck source=scripts/vagrant/common.sh
source "$HERE/common.sh"
cd "$ROOT"

require_root "sudo make vagrant-check"
TIMEOUT_S="${SAE_VM_TIMEOUT_S:-5400}"
[[ "$TIMEOUT_S" =~ ^[1-9][0-9]*$ ]] || die "SAE_VM_TIMEOUT_S=$TIMEOUT_S must be whole seconds > 0"

# One check at a time on this host (one VM name, one state directory).
private_dir "$SAE_VAGRANT_HOME"
private_dir "$VAGRANT_DOTFILE_PATH"
lock="$SAE_VAGRANT_HOME/check.lock"
[[ ! -L "$lock" ]] || die "$lock is a symlink: remove it"
exec 9>>"$lock"
flock -n 9 || die "another vagrant-check is running (lock $lock)"

export VAGRANT_DEFAULT_PROVIDER=libvirt
# A PVM /dev/kvm (kvm_pvm: KVM for hosts that are themselves VMs without hardware
# virtualisation) runs only guest kernels built for PVM; a stock Debian kernel hangs
# right after the boot loader. There the VM runs under qemu's software emulation.
if [[ -z "${SAE_VM_DRIVER:-}" ]]; then
    if [[ -d /sys/module/kvm_pvm ]]; then SAE_VM_DRIVER=qemu; else SAE_VM_DRIVER=kvm; fi
fi
export SAE_VM_DRIVER
# The quick reproduction takes hours under software emulation: there the smoke form runs.
SAE_VM_RUN="${SAE_VM_RUN:-$(default_run_form "$SAE_VM_DRIVER")}"
case "$SAE_VM_RUN" in
    reproduce | smoke) ;;
    *) die "SAE_VM_RUN=$SAE_VM_RUN is not valid here: reproduce or smoke" ;;
esac
export SAE_VM_RUN
echo "vagrant-check: the $SAE_VM_RUN form, VM driver $SAE_VM_DRIVER"
RESULTS="$ROOT/results/vagrant-reproduce"
stage="$(mktemp -d)"  # mode 0700, a fresh name
TIMINGS="$stage/timings.tsv"
: >"$TIMINGS"
exec > >(tee -a "$stage/check.log") 2>&1

vm_made=0
finish() {
    local rc=$?
    if ((vm_made)); then
        try_step "vagrant destroy" vagrant destroy -f
        ((STEP_RC == 0)) || rc=1
    fi
    # Vagrant's upload progress redraws one line thousands of times: keep the last state.
    sed -i -e 's/\r/\n/g' -e 's/\x1b\[K//g' "$stage/check.log" 2>/dev/null || true
    sed -i -e '/^Progress: [0-9]*%$/d' "$stage/check.log" 2>/dev/null || true
    rm -rf "$RESULTS"
    mkdir -p "$(dirname "$RESULTS")"
    cp -a "$stage/." "$RESULTS/"
    rm -rf "$stage"
    echo "vagrant-check: step durations (seconds, exit status), also in $RESULTS/timings.tsv:"
    sed 's/^/  /' "$RESULTS/timings.tsv"
    if ((rc == 0)); then
        echo "vagrant-check: PASSED ($SAE_VM_RUN); report in $RESULTS"
    else
        echo "vagrant-check: FAILED (exit $rc); what was copied back is in $RESULTS" >&2
    fi
    exit "$rc"
}
trap finish EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

host_info() {
    {
        echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
        echo "mode: $SAE_VM_RUN"
        echo "box: $SAE_VAGRANT_BOX"
        echo "host kernel: $(uname -r)"
        echo "host cpus: $(nproc)"
        grep -m1 'model name' /proc/cpuinfo || true
        echo "host memory: $(free -m | awk '/^Mem:/ {print $2 " MB total, " $7 " MB available"}')"
        echo "host load: $(cut -d' ' -f1-3 /proc/loadavg)"
        echo "vagrant: $(vagrant --version)"
        echo "plugins: $(vagrant plugin list 2>/dev/null | tr '\n' ' ')"
        echo "qemu: $(qemu-system-x86_64 --version | head -n 1)"
        echo "libvirt: $(virsh -c "$LIBVIRT_URI" version --daemon 2>/dev/null | grep -i daemon || true)"
        echo "kvm modules: $(cd /sys/module && echo kvm*)"
        echo "VM: 2 vCPUs, 4096 MB (Vagrantfile), libvirt driver $SAE_VM_DRIVER"
        echo "timeout scale in the VM: ${SAE_TIMEOUT_SCALE:-Vagrantfile default}"
    } | tee "$stage/host.txt"
}

prepare_host() {
    ensure_host_packages
    ensure_libvirtd
    ensure_default_pool
}

box_present() {
    local boxes
    boxes="$(vagrant box list 2>/dev/null || true)"
    awk -v b="$SAE_VAGRANT_BOX" '$1 == b { found = 1 } END { exit !found }' <<<"$boxes"
}

copy_back() {
    vagrant ssh-config >"$stage/ssh-config"
    ssh -F "$stage/ssh-config" -o LogLevel=ERROR default \
        'sudo tar -C /vagrant/results -cf - vagrant-reproduce' |
        tar -xf - -C "$stage" --strip-components=1
    rm -f "$stage/ssh-config"
}

step "host: packages and libvirtd" prepare_host
if ! box_present; then
    step "host: build the box (make vagrant-box)" bash "$HERE/build-box.sh"
fi
host_info
# A VM left by an interrupted earlier check would be reused by `vagrant up`: remove it.
vagrant destroy -f >/dev/null 2>&1 || true
vm_made=1
try_step "vagrant up --provider=libvirt (boot, sync)" vagrant up --provider=libvirt --no-provision
((STEP_RC == 0)) || exit "$STEP_RC"
try_step "provision: scripts/setup.sh" vagrant provision --provision-with setup
((STEP_RC == 0)) || exit "$STEP_RC"
status=0
try_step "provision: in-vm.sh $SAE_VM_RUN" \
    timeout "$TIMEOUT_S" vagrant provision --provision-with reproduce
((STEP_RC == 0)) || status=$STEP_RC
# Whatever the run left (a failed claim's partial report too) comes back.
try_step "copy the report back" copy_back
((STEP_RC == 0)) || status=1
exit "$status"
