# shellcheck shell=bash
# The text files of the local Vagrant box (sourced by scripts/vagrant/build-box.sh): the
# box's metadata.json and Vagrantfile, and the guest's configuration files. Kept apart
# from the build so they are checked without root or a VM (tests/unit/test_vagrant_box.py).
# The callers set `set -euo pipefail` themselves.

# Vagrant's well-known insecure public key, from the installed vagrant (never copied here).
vagrant_insecure_pubkey() {
    local f
    for f in /usr/share/rubygems-integration/all/gems/vagrant-*/keys/vagrant.pub \
             /opt/vagrant/embedded/gems/gems/vagrant-*/keys/vagrant.pub \
             /opt/vagrant/embedded/gems/*/gems/vagrant-*/keys/vagrant.pub; do
        if [[ -f "$f" ]]; then
            head -n 1 "$f"
            return 0
        fi
    done
    return 1
}

# write_box_metadata FILE SIZE_GB: what vagrant-libvirt reads from a box.
write_box_metadata() {
    local file=$1 size=$2
    [[ "$size" =~ ^[1-9][0-9]*$ ]] || {
        echo "write_box_metadata: size $size must be a positive whole number of GB" >&2
        return 1
    }
    printf '{"provider": "libvirt", "format": "qcow2", "virtual_size": %d}\n' "$size" >"$file"
}

# write_box_vagrantfile FILE: defaults every VM of the box starts from.
write_box_vagrantfile() {
    cat >"$1" <<'EOF'
# Defaults of the scaleacross-emu Debian 12 box (built by scripts/vagrant/build-box.sh).
Vagrant.configure("2") do |config|
  # No NFS server on the host and no guest additions: rsync the project in.
  config.vm.synced_folder ".", "/vagrant", type: "rsync"
  config.vm.provider :libvirt do |lv|
    lv.driver = "kvm"
    lv.disk_bus = "virtio"
    lv.nic_model_type = "virtio"
  end
end
EOF
}

# write_grub_cfg FILE ROOT_UUID: boot Debian's /vmlinuz at once, consoles on screen and on
# the serial port, classic interface names (the first NIC is eth0).
write_grub_cfg() {
    cat >"$1" <<EOF
set default=0
set timeout=0
serial --unit=0 --speed=115200
terminal_input console serial
terminal_output console serial
menuentry "Debian GNU/Linux 12 (scaleacross-emu box)" {
    search --no-floppy --fs-uuid --set=root $2
    linux /vmlinuz root=UUID=$2 ro net.ifnames=0 biosdevname=0 console=tty0 console=ttyS0,115200n8
    initrd /initrd.img
}
EOF
}

# write_guest_config ROOT ROOT_UUID MIRROR PUBKEY: the guest's files under ROOT (the user
# vagrant must exist already, its home is ROOT/home/vagrant).
write_guest_config() {
    local root=$1 uuid=$2 mirror=$3 pubkey=$4
    mkdir -p "$root/etc/network" "$root/etc/apt" "$root/etc/sudoers.d" \
        "$root/etc/ssh/sshd_config.d" "$root/etc/systemd/system/ssh.service.d" \
        "$root/home/vagrant/.ssh"

    echo bookworm64 >"$root/etc/hostname"
    printf '127.0.0.1\tlocalhost\n127.0.1.1\tbookworm64\n::1\tlocalhost ip6-localhost ip6-loopback\n' \
        >"$root/etc/hosts"
    printf 'UUID=%s\t/\text4\terrors=remount-ro\t0\t1\n' "$uuid" >"$root/etc/fstab"

    cat >"$root/etc/network/interfaces" <<'EOF'
source /etc/network/interfaces.d/*

auto lo
iface lo inet loopback

# The first NIC (Vagrant's management network) takes its address by DHCP.
auto eth0
iface eth0 inet dhcp
EOF

    cat >"$root/etc/apt/sources.list" <<EOF
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb ${mirror%/debian}/debian-security bookworm-security main
EOF

    echo 'vagrant ALL=(ALL) NOPASSWD: ALL' >"$root/etc/sudoers.d/vagrant"
    chmod 0440 "$root/etc/sudoers.d/vagrant"

    printf 'UseDNS no\nPasswordAuthentication yes\n' >"$root/etc/ssh/sshd_config.d/vagrant.conf"
    # The box carries no host keys: each VM makes its own before sshd's config test.
    cat >"$root/etc/systemd/system/ssh.service.d/host-keys.conf" <<'EOF'
[Service]
ExecStartPre=
ExecStartPre=/usr/bin/ssh-keygen -A
ExecStartPre=/usr/sbin/sshd -t
EOF

    printf '%s\n' "$pubkey" >"$root/home/vagrant/.ssh/authorized_keys"
}
