#!/usr/bin/env bash
# Idempotent machine + venv setup for scaleacross-emu. Run as root from anywhere:
#   sudo bash scripts/setup.sh
# A second run changes nothing and only reports.
set -euo pipefail

if [[ $(id -u) -ne 0 ]]; then
    echo "setup.sh: must run as root (it installs Debian packages and loads kernel modules)." >&2
    echo "          try: sudo bash $0   (or: sudo make setup)" >&2
    exit 1
fi

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

PYTHON=/usr/bin/python3          # Debian's python, never a pyenv/conda one
VENV="$ROOT/.venv"
STAMP="$VENV/.scaleacross-installed"

# python3-wheel is needed by Debian's setuptools 66 for the offline
# (--no-build-isolation) editable install below.
# chromium: the browser tests open the reports and the docs site in it (headless).
# clang and libbpf-dev: the switch ports' eBPF program (emu/bpf/port.c) is built from
# source here (step 6) and loaded through libbpf1 (pulled in by libbpf-dev).
# gcc, python3-dev, libisal-dev: the transports' compiled helpers (transports/native: Cython
# against ISA-L's CRC32; step 7).
PACKAGES=(mininet iproute2 nftables tcpdump frr ruby python3-venv python3-wheel
          iperf3 ethtool procps psmisc kmod iputils-ping chromium clang libbpf-dev
          gcc python3-dev libisal-dev)
MODULES=(sch_htb veth)

did=()

# 1. Debian packages: install only what is missing.
missing=()
for pkg in "${PACKAGES[@]}"; do
    status="$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)"
    [[ "$status" == installed ]] || missing+=("$pkg")
done
if ((${#missing[@]})); then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q "${missing[@]}"
    did+=("installed Debian packages: ${missing[*]}")
fi

# 2. Kernel modules: load when available; built-in or absent is not an error.
loaded=()
for mod in "${MODULES[@]}"; do
    if [[ ! -d /sys/module/$mod ]] && modprobe -q "$mod" 2>/dev/null; then
        loaded+=("$mod")
    fi
done
if ((${#loaded[@]})); then did+=("loaded kernel modules: ${loaded[*]}"); fi

# 3. FRR's per-namespace daemons need root in the frr and frrvty groups.
for grp in frr frrvty; do
    if getent group "$grp" >/dev/null && ! id -nG root | tr ' ' '\n' | grep -qx "$grp"; then
        usermod -a -G "$grp" root
        did+=("added root to group $grp")
    fi
done

# 4. The venv: Debian's python with system site-packages (mininet comes from there).
venv_ok() {
    [[ -x "$VENV/bin/python" && -f "$VENV/pyvenv.cfg" ]] &&
        grep -qx 'include-system-site-packages = true' "$VENV/pyvenv.cfg" &&
        grep -qx 'home = /usr/bin' "$VENV/pyvenv.cfg"
}
if ! venv_ok; then
    [[ -e "$VENV" ]] && rm -rf "$VENV"
    "$PYTHON" -m venv --system-site-packages "$VENV"
    did+=("created $VENV from $PYTHON (--system-site-packages)")
fi

# 5. The project itself, editable, with the test, sweep and docs extras: only when pyproject.toml
#    (or this script, which holds the install command) is newer than the stamp.
#    editable_mode=compat puts the repo root on sys.path with a plain .pth, so
#    packages and __init__.py files added after the install are picked up.
#    PyPI's torch wheels for Linux x86_64 are CUDA builds of several GB: unless a local
#    wheel cache already holds the pinned CPU build, ask PyTorch's CPU index too (pip
#    then prefers 2.13.0+cpu).
if [[ ! -f "$STAMP" || pyproject.toml -nt "$STAMP" || setup.py -nt "$STAMP" ||
      scripts/setup.sh -nt "$STAMP" ]]; then
    if ! compgen -G "/opt/wheels/torch-2.13.0*" >/dev/null && [[ -z "${PIP_EXTRA_INDEX_URL:-}" ]]; then
        export PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu
    fi
    # Cython first: setup.py builds the compiled helpers with it (no build isolation)
    "$VENV/bin/pip" install -q --disable-pip-version-check 'cython>=3.1,<4'
    "$VENV/bin/pip" install -q --disable-pip-version-check --no-build-isolation \
        --config-settings editable_mode=compat -e '.[test,sweep,docs]'
    touch "$STAMP"
    did+=("pip install -e '.[test,sweep,docs]' into .venv")
fi

# 6. The switch ports' eBPF program, built from its source into a root-owned cache
#    (/var/cache/scaleacross-emu/bpf, named by the source's hash: an edited source is
#    rebuilt, a built one is not built again).
bpf_out="$("$VENV/bin/python" -m emu.bpf.build)"
case "$bpf_out" in
    *"already built"*) ;;
    *) did+=("$bpf_out") ;;
esac

# 7. The transports' compiled helpers (transports/native/*.pyx), built in place: when one is
#    missing or older than its source. Without them the transports refuse to start.
native_stale() {
    local pyx so
    for pyx in transports/native/*.pyx; do
        so=$(compgen -G "${pyx%.pyx}.cpython-*.so" | head -n1 || true)
        [[ -z "$so" || "$pyx" -nt "$so" || transports/native/batchio.h -nt "$so" ]] && return 0
    done
    return 1
}
if native_stale; then
    "$VENV/bin/python" setup.py -q build_ext --inplace
    did+=("built the transports' compiled helpers (transports/native)")
fi

if ((${#did[@]})); then
    for line in "${did[@]}"; do echo "setup: $line"; done
else
    echo "setup: nothing to do (packages, modules, groups, .venv and install all up to date)"
fi
