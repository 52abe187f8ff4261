"""The local Vagrant box's text files (scripts/vagrant/boxfiles.sh), written into a temp
directory and read back: no root, loop device or VM needed.
"""

from __future__ import annotations

import json
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
BOXFILES = ROOT / "scripts/vagrant/boxfiles.sh"
UUID = "0b5c1e0e-5f3a-4d43-9c1e-2f0d6a7b8c9d"
KEY = "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQ== vagrant insecure public key"


def run(func: str, *args: str) -> subprocess.CompletedProcess[str]:
    script = f'set -euo pipefail; source "{BOXFILES}"; {func} "$@"'
    return subprocess.run(["bash", "-c", script, "boxfiles", *args], capture_output=True,
                          text=True, timeout=30)


def test_metadata_is_exactly_what_vagrant_libvirt_reads(tmp_path: Path) -> None:
    f = tmp_path / "metadata.json"
    p = run("write_box_metadata", str(f), "20")
    assert p.returncode == 0, p.stderr
    assert json.loads(f.read_text()) == {"provider": "libvirt", "format": "qcow2",
                                         "virtual_size": 20}


@pytest.mark.parametrize("size", ["0", "-3", "20G", "", "1.5"])
def test_metadata_refuses_a_bad_size(tmp_path: Path, size: str) -> None:
    f = tmp_path / "metadata.json"
    p = run("write_box_metadata", str(f), size)
    assert p.returncode != 0
    assert f"size {size} must be a positive whole number of GB" in p.stderr
    assert not f.exists()


def test_box_vagrantfile_is_valid_ruby_with_rsync_and_kvm(tmp_path: Path) -> None:
    f = tmp_path / "Vagrantfile"
    assert run("write_box_vagrantfile", str(f)).returncode == 0
    text = f.read_text()
    assert 'config.vm.synced_folder ".", "/vagrant", type: "rsync"' in text
    assert 'lv.driver = "kvm"' in text
    if shutil.which("ruby"):
        p = subprocess.run(["ruby", "-c", str(f)], capture_output=True, text=True)
        assert p.returncode == 0, p.stderr


def test_grub_cfg_boots_the_root_by_uuid_with_eth0(tmp_path: Path) -> None:
    f = tmp_path / "grub.cfg"
    assert run("write_grub_cfg", str(f), UUID).returncode == 0
    text = f.read_text()
    assert f"search --no-floppy --fs-uuid --set=root {UUID}" in text
    linux = next(line.split() for line in text.splitlines() if line.strip().startswith("linux"))
    assert linux[1] == "/vmlinuz"
    assert f"root=UUID={UUID}" in linux and "net.ifnames=0" in linux
    assert linux[-1] == "console=ttyS0,115200n8"  # the last console is /dev/console
    assert "initrd /initrd.img" in text
    assert "set timeout=0" in text


def test_guest_config_follows_vagrant_conventions(tmp_path: Path) -> None:
    root = tmp_path / "root"
    p = run("write_guest_config", str(root), UUID, "http://deb.debian.org/debian", KEY)
    assert p.returncode == 0, p.stderr
    sudoers = root / "etc/sudoers.d/vagrant"
    assert sudoers.read_text() == "vagrant ALL=(ALL) NOPASSWD: ALL\n"
    assert stat.S_IMODE(sudoers.stat().st_mode) == 0o440
    assert (root / "home/vagrant/.ssh/authorized_keys").read_text() == KEY + "\n"
    assert (root / "etc/fstab").read_text() == f"UUID={UUID}\t/\text4\terrors=remount-ro\t0\t1\n"
    interfaces = (root / "etc/network/interfaces").read_text().splitlines()
    assert "auto eth0" in interfaces and "iface eth0 inet dhcp" in interfaces
    assert (root / "etc/hostname").read_text() == "bookworm64\n"
    sources = (root / "etc/apt/sources.list").read_text().splitlines()
    assert sources == ["deb http://deb.debian.org/debian bookworm main",
                       "deb http://deb.debian.org/debian bookworm-updates main",
                       "deb http://deb.debian.org/debian-security bookworm-security main"]


def test_each_vm_makes_its_host_keys_before_sshd_checks_them(tmp_path: Path) -> None:
    root = tmp_path / "root"
    assert run("write_guest_config", str(root), UUID, "http://m/debian", KEY).returncode == 0
    dropin = (root / "etc/systemd/system/ssh.service.d/host-keys.conf").read_text()
    pre = [line for line in dropin.splitlines() if line.startswith("ExecStartPre=")]
    # Cleared first, then keygen before the config test that needs the keys.
    assert pre == ["ExecStartPre=", "ExecStartPre=/usr/bin/ssh-keygen -A",
                   "ExecStartPre=/usr/sbin/sshd -t"]
    assert "UseDNS no" in (root / "etc/ssh/sshd_config.d/vagrant.conf").read_text()


def test_in_vm_script_refuses_an_unknown_mode_by_name() -> None:
    p = subprocess.run(["bash", str(ROOT / "scripts/vagrant/in-vm.sh"), "everything"],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 1
    assert "mode everything is not valid: reproduce or smoke" in p.stderr


@pytest.mark.parametrize("driver,form", [("qemu", "smoke"), ("kvm", "reproduce")])
def test_the_check_runs_the_smoke_form_under_software_emulation(driver: str, form: str) -> None:
    common = ROOT / "scripts/vagrant/common.sh"
    p = subprocess.run(["bash", "-c", f'source "{common}"; default_run_form {driver}'],
                       capture_output=True, text=True, check=True)
    assert p.stdout.strip() == form
    in_vm = (ROOT / "scripts/vagrant/in-vm.sh").read_text()
    assert '"$EMU" demo --paths --out "$OUT/demo-paths"' in in_vm
