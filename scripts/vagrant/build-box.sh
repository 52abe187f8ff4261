#!/usr/bin/env bash
# Build a Debian 12 (bookworm) libvirt box locally and `vagrant box add` it, for hosts that
# reach the Debian mirror but not Vagrant's box catalogue. Run as root (sudo make vagrant-box).
#
# The box follows Vagrant's conventions: user vagrant (password vagrant) holding Vagrant's
# well-known insecure public key, passwordless sudo, root password vagrant, sshd, DHCP on
# the first NIC (eth0), rsync for the synced folder. The disk is a qcow2 image with one
# ext4 partition and the stock Debian kernel (it ships sch_netem), booted by GRUB: its
# core image is written into the gap before the partition directly, as no partition
# device is needed for that (some kernels do not scan loop devices' partitions).
#
#   SAE_VAGRANT_BOX      box name          (default scaleacross-emu/bookworm64)
#   SAE_BOX_SIZE_GB      virtual disk size (default 20)
#   SAE_DEBIAN_MIRROR    Debian mirror     (default http://deb.debian.org/debian)
#   SAE_BOX_KEEP         a path: also keep the .box file there
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=scripts/vagrant/common.sh
source "$HERE/common.sh"
# shellcheck source=scripts/vagrant/boxfiles.sh
source "$HERE/boxfiles.sh"

SIZE_GB="${SAE_BOX_SIZE_GB:-20}"
MIRROR="${SAE_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
SUITE=bookworm
if ! [[ "$SIZE_GB" =~ ^[0-9]+$ ]] || ((SIZE_GB < 4)); then
    die "SAE_BOX_SIZE_GB=$SIZE_GB must be a whole number of GB, at least 4"
fi

# What the guest needs beyond minbase: a kernel that boots (and its initramfs), networking
# by ifupdown + DHCP, sshd and sudo for Vagrant, rsync for the synced folder, dbus for
# hostnamectl (Vagrant sets the hostname with it).
GUEST_PACKAGES=(systemd-sysv udev kmod linux-image-amd64 initramfs-tools zstd ifupdown
                isc-dhcp-client iproute2 netbase openssh-server sudo rsync ca-certificates
                dbus procps less)

require_root "sudo make vagrant-box"
ensure_host_packages

PUBKEY="$(vagrant_insecure_pubkey)" ||
    die "cannot find Vagrant's insecure public key (keys/vagrant.pub in the vagrant gem)"

work="$(mktemp -d /var/tmp/sae-box.XXXXXX)"
mnt="$work/root"
loop=""
TIMINGS="$work/timings.tsv"

cleanup() {
    local rc=$?
    # Everything mounted below the root (debootstrap's /proc and /sys when it stopped
    # half-way), then the root itself, then the loop device and the work directory.
    if mountpoint -q "$mnt" 2>/dev/null; then
        umount -R "$mnt" 2>/dev/null || umount -lR "$mnt" || true
    fi
    if [[ -n "$loop" ]]; then losetup -d "$loop" 2>/dev/null || true; fi
    rm -rf "$work"
    if ((rc != 0)); then echo "build-box: FAILED (exit $rc); released mounts and devices" >&2; fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

disk="$work/disk.raw"
start_sector=2048 # 1 MiB aligned; GRUB's core image goes in the sectors before it

make_disk() {
    truncate -s "${SIZE_GB}G" "$disk"
    printf 'label: dos\nstart=%d, type=83, bootable\n' "$start_sector" | sfdisk -q "$disk"
    # This kernel may not scan loop partitions (no /dev/loopNp1): map the partition itself.
    loop="$(losetup -f --show -o $((start_sector * 512)) "$disk")"
    # Plain ext4 features every GRUB reads (no 64bit, no metadata_csum).
    mkfs.ext4 -q -L root -O ^64bit,^metadata_csum "$loop"
    mkdir -p "$mnt"
    mount "$loop" "$mnt"
}

bootstrap() {
    local include
    include="$(IFS=,; echo "${GUEST_PACKAGES[*]}")"
    debootstrap --variant=minbase --include="$include" "$SUITE" "$mnt" "$MIRROR"
}

configure_guest() {
    local uuid
    uuid="$(blkid -s UUID -o value "$loop")"
    chroot "$mnt" /bin/bash -euo pipefail -c '
        id vagrant >/dev/null 2>&1 || useradd -m -s /bin/bash -U vagrant
        echo vagrant:vagrant | chpasswd
        echo root:vagrant | chpasswd'
    write_guest_config "$mnt" "$uuid" "$MIRROR" "$PUBKEY"
    chroot "$mnt" /bin/bash -euo pipefail -c '
        chown -R vagrant:vagrant /home/vagrant/.ssh
        chmod 700 /home/vagrant/.ssh
        chmod 600 /home/vagrant/.ssh/authorized_keys
        systemctl enable ssh.service networking.service >/dev/null 2>&1
        apt-get clean
    '
    # Every VM made from the box gets its own host keys (first boot) and machine-id.
    rm -f "$mnt"/etc/ssh/ssh_host_*
    : >"$mnt/etc/machine-id"
    rm -f "$mnt/var/lib/dbus/machine-id"
    # Debian points /vmlinuz and /initrd.img at the current kernel; GRUB boots those, so
    # kernel upgrades inside the VM need no bootloader update.
    [[ -e "$mnt/vmlinuz" && -e "$mnt/initrd.img" ]] ||
        die "the guest has no /vmlinuz or /initrd.img symlink (linux-image-amd64 installed?)"
    mkdir -p "$mnt/boot/grub/i386-pc"
    cp /usr/lib/grub/i386-pc/*.mod /usr/lib/grub/i386-pc/*.lst "$mnt/boot/grub/i386-pc/"
    write_grub_cfg "$mnt/boot/grub/grub.cfg" "$uuid"
    fstrim "$mnt" >/dev/null 2>&1 || true # free blocks of the sparse image stay holes
}

seal_disk() {
    # Recursively: debootstrap may leave its /proc, /sys or /dev/pts mounted in the guest.
    sync
    umount -R "$mnt"
    # The image must be clean (no journal to replay): GRUB reads it as it lies.
    e2fsck -f -p "$loop" >/dev/null
    losetup -d "$loop"
    loop=""
    # GRUB's boot sector (its first 440 bytes: the partition table stays) loads the core
    # image from sector 1, whose block list grub-mkimage fills in; the core finds the rest
    # (modules, grub.cfg) in the partition.
    local core="$work/core.img"
    grub-mkimage -O i386-pc -o "$core" -p '(hd0,msdos1)/boot/grub' \
        biosdisk part_msdos ext2 normal linux search search_fs_uuid serial terminal
    (($(stat -c %s "$core") <= (start_sector - 1) * 512)) ||
        die "GRUB's core image does not fit before the partition"
    dd if=/usr/lib/grub/i386-pc/boot.img of="$disk" bs=440 count=1 conv=notrunc status=none
    dd if="$core" of="$disk" bs=512 seek=1 conv=notrunc status=none
}

package_box() {
    local out="$work/box"
    mkdir -p "$out"
    qemu-img convert -c -O qcow2 "$disk" "$out/box.img"
    rm -f "$disk"
    write_box_metadata "$out/metadata.json" "$SIZE_GB"
    write_box_vagrantfile "$out/Vagrantfile"
    tar -C "$out" -cf "$work/scaleacross-emu-bookworm64.box" metadata.json Vagrantfile box.img
    rm -rf "$out"
}

add_box() {
    vagrant box add --force --name "$SAE_VAGRANT_BOX" "$work/scaleacross-emu-bookworm64.box"
    if [[ -n "${SAE_BOX_KEEP:-}" ]]; then cp "$work/scaleacross-emu-bookworm64.box" "$SAE_BOX_KEEP"; fi
    ensure_libvirtd
    ensure_default_pool
    drop_pool_box_images
}

step "disk (${SIZE_GB} GB, one ext4 partition)" make_disk
step "debootstrap $SUITE (minbase + kernel, sshd, sudo, rsync)" bootstrap
step "guest configuration (vagrant user, ssh, DHCP, GRUB files)" configure_guest
step "seal the disk (GRUB boot sector and core image)" seal_disk
step "package the box (qcow2, metadata.json, Vagrantfile)" package_box
step "vagrant box add $SAE_VAGRANT_BOX" add_box

echo "build-box: added box $SAE_VAGRANT_BOX; step durations (seconds):"
cut -f1,2 "$TIMINGS" | sed 's/^/  /'
