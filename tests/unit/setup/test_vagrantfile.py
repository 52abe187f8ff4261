"""The Vagrantfile, evaluated by Ruby against a stand-in for Vagrant's configuration API.

No Vagrant, VM or root needed: a small Ruby module records what the Vagrantfile
configures (box, synced folders, providers, provisioners) and prints it as JSON, so the
provisioning order, the reproduction step and the VM's resources are checked exactly.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
VAGRANTFILE = ROOT / "Vagrantfile"

pytestmark = pytest.mark.skipif(shutil.which("ruby") is None,
                                reason="ruby missing (scripts/setup.sh installs it)")

# Records Vagrant.configure("2") { |config| ... } into plain data.
RECORDER = r"""
require "json"

class Settings
  attr_reader :h
  def initialize; @h = {}; end
  def qemuargs(**kw); (@h["qemuargs"] ||= []) << kw[:value]; end
  def method_missing(m, *a, **kw)
    n = m.to_s
    return super unless n.end_with?("=")
    @h[n.chomp("=")] = a[0]
  end
  def respond_to_missing?(*) = true
end

class VMConfig
  attr_accessor :box, :hostname, :boot_timeout
  attr_reader :synced, :providers, :provisions
  def initialize; @synced = []; @providers = {}; @provisions = []; end
  def synced_folder(src, dst, **o); @synced << { "src" => src, "dst" => dst, "opts" => o }; end
  def provider(name); s = Settings.new; yield s; @providers[name.to_s] = s.h; end
  def provision(name, **o); @provisions << { "name" => name, "opts" => o }; end
end

class Config
  attr_reader :vm
  def initialize; @vm = VMConfig.new; end
end

module Vagrant
  def self.configure(version)
    c = Config.new
    yield c
    vm = c.vm
    puts JSON.generate({ "version" => version, "box" => vm.box, "hostname" => vm.hostname,
                         "boot_timeout" => vm.boot_timeout, "synced" => vm.synced,
                         "providers" => vm.providers, "provisions" => vm.provisions })
  end
end

load ARGV[0]
"""


def evaluate(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    rec = tmp_path / "recorder.rb"
    rec.write_text(RECORDER)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SAE_")}
    # No host wheel cache and no host CA certificates unless a test provides them.
    clean["SAE_WHEELS_DIR"] = str(tmp_path / "no-wheels")
    clean["SAE_HOST_CA_DIR"] = str(tmp_path / "no-ca")
    clean.update(env)
    return subprocess.run(["ruby", str(rec), str(VAGRANTFILE)], capture_output=True,
                          text=True, env=clean, cwd=ROOT, timeout=60)


def configured(tmp_path: Path, **env: str) -> dict:
    p = evaluate(tmp_path, **env)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_defaults_provision_setup_then_the_quick_reproduction(tmp_path: Path) -> None:
    c = configured(tmp_path)
    assert c["version"] == "2"
    assert c["box"] == "debian/bookworm64"
    names = [p["name"] for p in c["provisions"]]
    assert names == ["setup", "reproduce"]
    setup, last = (p["opts"] for p in c["provisions"])
    assert setup["inline"] == "bash /vagrant/scripts/setup.sh"
    assert setup["privileged"] is True and setup["type"] == "shell"
    assert setup["env"] == {}  # no local wheels: setup.sh asks PyTorch's CPU index itself
    assert last["inline"] == "bash /vagrant/scripts/vagrant/in-vm.sh reproduce"
    assert last["privileged"] is True
    assert last["env"] == {"SAE_TIMEOUT_SCALE": "1"}  # kvm: a normal machine's waits
    # The script the step runs exists and runs `emu reproduce --quick`.
    in_vm = (ROOT / "scripts/vagrant/in-vm.sh").read_text()
    assert '"$EMU" reproduce --quick --out "$OUT/reproduce"' in in_vm


def test_vm_resources_for_both_providers(tmp_path: Path) -> None:
    c = configured(tmp_path)
    vb, lv = c["providers"]["virtualbox"], c["providers"]["libvirt"]
    assert (vb["cpus"], vb["memory"]) == (2, 4096)
    assert (lv["cpus"], lv["memory"]) == (2, 4096)


def test_libvirt_cpu_follows_the_driver(tmp_path: Path) -> None:
    kvm = configured(tmp_path)["providers"]["libvirt"]
    assert kvm["driver"] == "kvm"
    assert kvm["cpu_mode"] == "host-passthrough"
    assert kvm["qemuargs"] == ["-cpu", "host,-arch-capabilities"]
    emulated = configured(tmp_path, SAE_VM_DRIVER="qemu")
    lv = emulated["providers"]["libvirt"]
    assert lv["driver"] == "qemu"
    assert lv["qemuargs"] == ["-cpu", "max"]
    assert emulated["boot_timeout"] > configured(tmp_path)["boot_timeout"]
    # Software emulation: the emulator inside waits longer for things to get ready.
    assert emulated["provisions"][-1]["opts"]["env"] == {"SAE_TIMEOUT_SCALE": "20"}
    chosen = configured(tmp_path, SAE_VM_DRIVER="qemu", SAE_TIMEOUT_SCALE="40")
    assert chosen["provisions"][-1]["opts"]["env"] == {"SAE_TIMEOUT_SCALE": "40"}


def test_project_synced_by_rsync_without_host_state(tmp_path: Path) -> None:
    c = configured(tmp_path)
    assert len(c["synced"]) == 1
    s = c["synced"][0]
    assert (s["src"], s["dst"], s["opts"]["type"]) == (".", "/vagrant", "rsync")
    # The host's venv and results never reach the VM (nor leave it: rsync is one way).
    assert {".venv/", "results/", ".vagrant/"} <= set(s["opts"]["rsync__exclude"])


def test_local_torch_wheel_is_lent_to_the_vm(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"")
    c = configured(tmp_path, SAE_WHEELS_DIR=str(wheels))
    assert {"src": str(wheels), "dst": "/opt/wheels",
            "opts": {"type": "rsync"}} in c["synced"]
    assert c["provisions"][0]["opts"]["env"] == {"PIP_FIND_LINKS": "/opt/wheels"}


def test_other_wheels_alone_are_not_lent(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "numpy-2.0.0-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"")
    c = configured(tmp_path, SAE_WHEELS_DIR=str(wheels))
    assert [s["dst"] for s in c["synced"]] == ["/vagrant"]
    assert c["provisions"][0]["opts"]["env"] == {}


def test_host_ca_certificates_are_lent_and_trusted(tmp_path: Path) -> None:
    ca = tmp_path / "ca"
    (ca / "proxy").mkdir(parents=True)
    (ca / "proxy" / "egress.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    c = configured(tmp_path, SAE_HOST_CA_DIR=str(ca))
    assert {"src": str(ca), "dst": "/usr/local/share/ca-certificates/host",
            "opts": {"type": "rsync"}} in c["synced"]
    setup = c["provisions"][0]["opts"]
    assert setup["inline"] == ("update-ca-certificates >/dev/null && "
                               "bash /vagrant/scripts/setup.sh")
    assert setup["env"] == {"PIP_CERT": "/etc/ssl/certs/ca-certificates.crt"}


@pytest.mark.parametrize(("mode", "names", "inline"), [
    ("smoke", ["setup", "reproduce"], "bash /vagrant/scripts/vagrant/in-vm.sh smoke"),
    ("none", ["setup"], None),
])
def test_last_step_modes(tmp_path: Path, mode: str, names: list[str],
                         inline: str | None) -> None:
    c = configured(tmp_path, SAE_VM_RUN=mode)
    assert [p["name"] for p in c["provisions"]] == names
    if inline is not None:
        assert c["provisions"][-1]["opts"]["inline"] == inline


def test_local_box_by_environment(tmp_path: Path) -> None:
    c = configured(tmp_path, SAE_VAGRANT_BOX="scaleacross-emu/bookworm64")
    assert c["box"] == "scaleacross-emu/bookworm64"


@pytest.mark.parametrize(("var", "value", "valid"), [
    ("SAE_VM_RUN", "everything", "reproduce, smoke or none"),
    ("SAE_VM_DRIVER", "xen", "kvm or qemu"),
    ("SAE_TIMEOUT_SCALE", "0.5", "a number from 1 to 1000"),
    ("SAE_TIMEOUT_SCALE", "fast", "a number from 1 to 1000"),
])
def test_bad_settings_are_refused_by_name(tmp_path: Path, var: str, value: str,
                                          valid: str) -> None:
    p = evaluate(tmp_path, **{var: value})
    assert p.returncode != 0
    assert f'{var}="{value}" is not valid: {valid}' in p.stderr
