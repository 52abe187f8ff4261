# shellcheck shell=bash
# Sourced (not run) by scripts/vagrant/build-box.sh, check.sh and in-vm.sh:
# the host's packages, the libvirt daemon and its default storage pool, and timing.
# The callers set `set -euo pipefail` themselves.

# The local box both scripts agree on (the Vagrantfile reads SAE_VAGRANT_BOX too).
SAE_VAGRANT_BOX="${SAE_VAGRANT_BOX:-scaleacross-emu/bookworm64}"
export SAE_VAGRANT_BOX
# Vagrant's per-project state (the VM's SSH key, the machine id `vagrant destroy -f` acts
# on) and the check's lock live outside the project tree, in a root-owned 0700 directory:
# never at a fixed path under /tmp or /var/tmp that another user could create first.
SAE_VAGRANT_HOME=/var/lib/scaleacross-emu
export VAGRANT_DOTFILE_PATH="${VAGRANT_DOTFILE_PATH:-$SAE_VAGRANT_HOME/vagrant-state}"

# Everything the box build and the VM check need on a Debian 12 host.
HOST_PACKAGES=(vagrant vagrant-libvirt libvirt-daemon-system libvirt-clients qemu-system-x86
               qemu-utils debootstrap grub-pc-bin fdisk e2fsprogs dnsmasq-base
               iptables rsync openssh-client tar)

LIBVIRT_URI=qemu:///system

die() {
    echo "$(basename "$0"): $*" >&2
    exit 1
}

# private_dir DIR: create DIR (root's, mode 0700) if missing; refuse one that is a symlink,
# not owned by root, or writable by group or others (someone else may have planted it).
private_dir() {
    local d=$1 owner mode
    if [[ ! -e "$d" && ! -L "$d" ]]; then
        install -d -m 0700 -o root -g root "$d"
    fi
    [[ -d "$d" && ! -L "$d" ]] || die "$d is not a directory (or is a symlink): remove it"
    owner="$(stat -c %u "$d")"
    mode="$(stat -c %a "$d")"
    [[ "$owner" == 0 ]] || die "$d is owned by uid $owner, not root: remove it"
    (( (8#$mode & 8#022) == 0 )) || die "$d is writable by group or others (mode $mode)"
}

# default_run_form DRIVER: the check's form for a VM driver. Under qemu's software
# emulation the quick reproduction takes hours: the smoke form (set-up, doctor, a 2-DC
# fabric, `emu demo --paths`) runs there; the reproduction under kvm.
default_run_form() {
    if [[ "$1" == qemu ]]; then echo smoke; else echo reproduce; fi
}

# require_root HOW: HOW is the command to suggest (e.g. "sudo make vagrant-check").
require_root() {
    [[ $(id -u) -eq 0 ]] || die "must run as root (packages, loop devices, libvirt," \
        "namespaces); try: $1"
}

# Install the host packages that are missing (like scripts/setup.sh does for its own).
ensure_host_packages() {
    local missing=() pkg status
    for pkg in "${HOST_PACKAGES[@]}"; do
        status="$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)"
        [[ "$status" == installed ]] || missing+=("$pkg")
    done
    if ((${#missing[@]})); then
        echo "host: installing ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -q
        apt-get install -y -q --no-install-recommends "${missing[@]}"
    fi
    [[ -c /dev/kvm ]] || die "/dev/kvm is missing: the VM needs hardware virtualisation" \
        "(enable VT-x/AMD-V, or nested virtualisation when this host is itself a VM)"
    # libvirt runs qemu as libvirt-qemu (group kvm). Without udev nobody applied Debian's
    # rule for /dev/kvm (group kvm, mode 0660): apply it.
    if [[ "$(stat -c %G /dev/kvm)" != kvm ]] && getent group kvm >/dev/null; then
        chgrp kvm /dev/kvm
        chmod 0660 /dev/kvm
        echo "host: /dev/kvm now group kvm, mode 0660 (as Debian's udev rule sets it)"
    fi
}

# libvirtd answers on the system socket. Without systemd (containers, minimal VMs) start
# virtlogd and libvirtd as daemons ourselves; they keep running for later checks.
ensure_libvirtd() {
    if virsh -c "$LIBVIRT_URI" version >/dev/null 2>&1; then return 0; fi
    if [[ -d /run/systemd/system ]]; then
        systemctl start virtlogd.socket libvirtd.socket libvirtd.service
    else
        pgrep -x virtlogd >/dev/null || virtlogd -d
        pgrep -x libvirtd >/dev/null || libvirtd -d
    fi
    local _
    for _ in $(seq 1 50); do
        virsh -c "$LIBVIRT_URI" version >/dev/null 2>&1 && return 0
        sleep 0.2
    done
    die "libvirtd does not answer on $LIBVIRT_URI"
}

# vagrant-libvirt uploads box images into and creates disks in the pool named "default".
ensure_default_pool() {
    if ! virsh -c "$LIBVIRT_URI" pool-info default >/dev/null 2>&1; then
        mkdir -p /var/lib/libvirt/images
        virsh -c "$LIBVIRT_URI" pool-define-as default dir --target /var/lib/libvirt/images \
            >/dev/null
    fi
    local info
    info="$(virsh -c "$LIBVIRT_URI" pool-info default)"
    if ! grep -q '^State:.*running' <<<"$info"; then
        virsh -c "$LIBVIRT_URI" pool-start default >/dev/null
    fi
    virsh -c "$LIBVIRT_URI" pool-autostart default >/dev/null 2>&1 || true
}

# vagrant-libvirt keeps the first upload of a box's image in the pool, named after the box,
# and never refreshes it: after re-adding the box, drop the stale copy.
drop_pool_box_images() {
    local prefix vol
    prefix="${SAE_VAGRANT_BOX//\//-VAGRANTSLASH-}_vagrant_box_image_"
    virsh -c "$LIBVIRT_URI" pool-refresh default >/dev/null 2>&1 || return 0
    while read -r vol _; do
        if [[ "$vol" == "$prefix"* ]]; then
            virsh -c "$LIBVIRT_URI" vol-delete --pool default "$vol" >/dev/null
            echo "host: dropped the stale box image $vol from libvirt's default pool"
        fi
    done < <(virsh -c "$LIBVIRT_URI" vol-list default 2>/dev/null | tail -n +3)
}

# Durations go to $TIMINGS (when set) as "NAME<TAB>SECONDS<TAB>EXIT STATUS" lines.
_record() {
    local name=$1 t0=$2 rc=$3 dt
    dt=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    if [[ -n "${TIMINGS:-}" ]]; then printf '%s\t%s\t%s\n' "$name" "$dt" "$rc" >>"$TIMINGS"; fi
    echo "== $name: ${dt} s (exit $rc)"
}

# step NAME CMD...: run CMD in this shell (it may set variables) and time it; a failure
# ends the script through errexit, as any command would.
step() {
    local name=$1 t0
    shift
    t0=$(date +%s.%N)
    echo "== $name: $*"
    "$@"
    _record "$name" "$t0" 0
}

# try_step NAME CMD...: run CMD in a subshell with errexit on, time it whether it fails or
# not, and leave its exit status in STEP_RC; returns 0 itself. (A function called as
# `f || ...` runs with errexit void, subshells included: so never call a step that way.)
STEP_RC=0
try_step() {
    local name=$1 t0
    shift
    t0=$(date +%s.%N)
    echo "== $name: $*"
    set +e
    (
        set -e
        "$@"
    )
    STEP_RC=$?
    set -e
    _record "$name" "$t0" "$STEP_RC"
}
