# scaleacross-emu. Every target that runs the emulator needs root (sudo make ...);
# `make unit` and `make lint` need neither root nor a network namespace, only the
# venv that `sudo make setup` (or any root target) created once. `make lint` also builds
# the docs site (mkdocs.yml, docs/) with --strict; `.venv/bin/mkdocs serve` shows it.
VENV := .venv
EMU  := $(VENV)/bin/emu
PY   := $(VENV)/bin/python

.PHONY: setup demo test unit bench clean lint venv soak native

setup:
	bash scripts/setup.sh

demo: setup
	$(EMU) demo

test: setup
	bash scripts/test.sh

bench: setup
	$(EMU) bench fabric --json

clean: setup
	$(EMU) clean

# The soak alone, longer than in `make test` (tests/root/test_soak.py: MRC and DBLP
# streams under a flapping and a gray link; nothing lost, every driver's memory flat).
SOAK_S ?= 300
soak: setup
	SAE_SOAK_S=$(SOAK_S) $(PY) -m pytest -q -p no:cacheprovider tests/root/test_soak.py

# The fast loop: no root, no set-up step, no fabric.
venv:
	@test -x $(PY) || { echo "no $(VENV): run 'sudo make setup' once first" >&2; exit 1; }

# The transports' compiled helpers (transports/native/*.pyx), rebuilt in place after a change
# (scripts/setup.sh builds them the first time).
native: venv
	$(PY) setup.py -q build_ext --inplace

unit: venv native
	$(PY) -m pytest -q -p no:cacheprovider -n 2 tests/unit

# mypy --strict on the parts held to it (what they import is read, not reported)
STRICT := transports/core transports/registry.py transports/kernel.py transports/plan.py \
          transports/planrecord.py topologies workloads/records.py emu/typedjson.py \
          workloads/training/fabric_bound.py

lint: venv native
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VENV)/bin/mypy --strict --follow-imports=silent $(STRICT)
	$(VENV)/bin/lint-imports --no-cache
	bash scripts/docs.sh

# A Debian 12 VM, end to end (root; installs vagrant, vagrant-libvirt, libvirt and qemu on
# the host when missing). vagrant-box builds the box locally with debootstrap (no box
# catalogue needed); vagrant-check boots it, provisions it with scripts/setup.sh, runs the
# quick reproduction inside (or, where the host's KVM cannot boot the box, a smoke form:
# doctor, a fabric, `emu demo --paths`), copies the results to results/vagrant-reproduce/
# and destroys the VM (on failure too). See scripts/vagrant/.
.PHONY: vagrant-box vagrant-check

vagrant-box:
	bash scripts/vagrant/build-box.sh

vagrant-check:
	bash scripts/vagrant/check.sh
