"""The Ray clusters `emu sweep` starts or joins (root): token authentication, the address
file `--cluster auto` trusts, a bounded join, and tasks that import only the project.

Unprivileged users are played by `nobody` (files planted with runuser), `emu` runs as
root, as CI runs it. The heads are real: `ray start --head --block` in a session of the
test's own, bound to 127.0.0.1, stopped by the test (never `ray stop`, which would stop
every Ray process of the machine).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from commands.sweep import cluster
from emu.errors import EmuError

from .procs import small_run

pytestmark = pytest.mark.root

REPO = Path(__file__).resolve().parents[2]
EMU = str(Path(sys.executable).parent / "emu")
TOKEN = "0123456789abcdef" * 4
# One point, the smallest run (2 workers on a 2 x 2 x 2 x 1 fabric, 8 steps).
BASE = small_run("sweepsec", steps=8, extra='eval_every = 4\ntarget_accuracy = 0.5\n')


def _sweep(d: Path) -> Path:
    (d / "base.toml").write_text(BASE)
    (d / "s.toml").write_text('name = "sec"\nbase = "base.toml"\nseeds = [1]\n')
    return d / "s.toml"


def _token_file(d: Path, token: str = TOKEN) -> Path:
    p = d / "auth_token"
    p.write_text(token)
    p.chmod(0o600)
    return p


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory every user can write into, as /tmp (sticky) is."""
    d = Path(tempfile.mkdtemp(prefix="sae-test-shared-", dir="/tmp"))
    d.chmod(0o1777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _as_nobody(*argv: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(["runuser", "-u", "nobody", "--", *argv], check=True,
                          capture_output=True, text=True, timeout=60, **kw)


def _emu(*args: str, env: dict[str, str] | None = None, cwd: str | Path = REPO,
         timeout: float = 300) -> subprocess.CompletedProcess:
    """`emu` as root runs it (the venv's script), this checkout's code first."""
    return subprocess.run([EMU, *args], capture_output=True, text=True, timeout=timeout,
                          cwd=cwd, env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})})


def _stop(p: subprocess.Popen) -> None:
    """Stop a test's head (`ray start --block`) and whatever of its session is left."""
    p.terminate()
    try:
        p.wait(60)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
    deadline = time.monotonic() + 60
    while left := [int(e.name) for e in os.scandir("/proc") if e.name.isdigit()
                   and _sid(int(e.name)) == p.pid]:
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        assert time.monotonic() < deadline, f"the test's head left {left}"
        time.sleep(0.1)


def _sid(pid: int) -> int | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else int(fields[3])


@contextmanager
def _head(tmp: Path, token: str | None) -> Iterator[str]:
    """A real one-node Ray head on 127.0.0.1 (token authentication iff ``token``);
    yields its GCS address."""
    d = Path(tempfile.mkdtemp(prefix="sae-test-head-", dir="/tmp"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(HOME=str(d), RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0",
               RAY_USAGE_STATS_ENABLED="0")
    if token is None:
        env["RAY_AUTH_MODE"] = "disabled"
    else:
        env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(_token_file(d, token)))
    log = open(d / "head.log", "wb")
    p = subprocess.Popen(
        [sys.executable, "-I", "-m", "ray.scripts.scripts", "start", "--head", "--block",
         "--port=0", f"--temp-dir={d}/ray", "--num-cpus=1",
         '--resources={"fabric_slot": 1}', "--include-dashboard=false",
         "--disable-usage-stats", f"--object-store-memory={128 * 1024 * 1024}"],
        cwd="/", env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        addr_file = d / "ray" / "ray_current_cluster"
        deadline = time.monotonic() + 120
        while not (addr_file.is_file() and addr_file.read_text().strip()):
            if p.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the test's Ray head did not start: "
                            f"{(d / 'head.log').read_text()[-2000:]}")
            time.sleep(0.1)
        yield addr_file.read_text().strip()
    finally:
        _stop(p)
        log.close()
        shutil.rmtree(d, ignore_errors=True)


@contextmanager
def _listener(as_user: str | None = None) -> Iterator[tuple[int, Path]]:
    """A TCP listener that accepts and records what it is sent, never answering (it does
    not speak Ray); run as ``as_user`` if given. Yields (port, its record file)."""
    d = Path(tempfile.mkdtemp(prefix="sae-test-listen-", dir="/tmp"))
    d.chmod(0o777)
    rec = d / "received"
    code = ("import socket, sys, threading\n"
            "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(16)\n"
            "print(s.getsockname()[1], flush=True)\n"
            "def take(c):\n"
            "    while True:\n"
            "        b = c.recv(65536)\n"
            "        if not b: return\n"
            "        with open(sys.argv[1], 'ab') as f: f.write(b)\n"
            "while True:\n"
            "    c, _ = s.accept()\n"
            "    open(sys.argv[1], 'ab').close()\n"
            "    threading.Thread(target=take, args=(c,), daemon=True).start()\n")
    argv = ["/usr/bin/python3", "-I", "-c", code, str(rec)]
    if as_user:
        argv = ["runuser", "-u", as_user, "--", *argv]
    # a session of its own: runuser's child is killed with it
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, cwd="/",
                         start_new_session=True)
    try:
        assert p.stdout is not None
        port = int(p.stdout.readline())
        yield port, rec
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        shutil.rmtree(d, ignore_errors=True)


# --- token authentication: a real head, without and with it ------------------------------

def test_a_head_without_token_authentication_is_refused_naming_the_fix(tmp_path):
    f = _sweep(tmp_path)
    token = _token_file(tmp_path)
    with _head(tmp_path, token=None) as addr:
        r = _emu("sweep", str(f), "--cluster", addr, "--out", str(tmp_path / "out"),
                 env={"RAY_AUTH_TOKEN_PATH": str(token)}, timeout=120)
        assert cluster.probe_auth(addr, TOKEN) == ("answered",)
    assert r.returncode == 2, r.stderr[-3000:]
    assert "runs without token authentication" in r.stderr
    assert "RAY_AUTH_MODE=token" in r.stderr and "docs/concepts/sweeps.md" in r.stderr
    assert not (tmp_path / "out").exists()


def test_a_head_with_token_authentication_is_joined_with_its_token_only(tmp_path,
                                                                          monkeypatch):
    import ray

    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))  # no /root/.ray/auth_token
    for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_ADDRESS"):
        monkeypatch.delenv(k, raising=False)
    with _head(tmp_path, token=TOKEN) as addr:
        assert cluster.probe_auth(addr) == ("refused",)
        assert cluster.probe_auth(addr, TOKEN) == ("refused", "answered")
        assert cluster.probe_auth(addr, "f" * 64) == ("refused", "refused")
        # no token here: refused before anything is sent
        monkeypatch.delenv("RAY_AUTH_TOKEN_PATH", raising=False)
        with pytest.raises(EmuError, match="no Ray token on this machine.*auth_token"):
            with cluster.connect(addr, say=lambda m: None):
                pass
        # a wrong one: the head refuses it
        monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(_token_file(tmp_path, "f" * 64)))
        with pytest.raises(EmuError, match="refused this machine's Ray token"):
            with cluster.connect(addr, say=lambda m: None):
                pass
        assert not ray.is_initialized()
        # the head's own
        (tmp_path / "auth_token").unlink()
        monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(_token_file(tmp_path)))
        with cluster.connect(addr, say=lambda m: None) as info:
            assert (info.nodes, info.slots, info.address) == (1, 1, addr)
            assert os.environ["RAY_AUTH_MODE"] == "token"

            @ray.remote(num_cpus=0, resources={"fabric_slot": 1})
            def where() -> str:
                return os.getcwd()

            assert ray.get(where.remote()) == "/"  # the head's, as `ray start` ran
        assert not ray.is_initialized()
        assert "RAY_AUTH_MODE" not in os.environ  # this process's settings put back


# --- --cluster auto: the address file --------------------------------------------------------

def test_auto_refuses_an_address_file_another_user_planted(tmp_path, shared_dir):
    f = _sweep(tmp_path)
    token = _token_file(tmp_path)
    with _listener(as_user="nobody") as (port, received):
        # As in the report: /tmp/ray made by nobody, with an address of its own.
        _as_nobody("sh", "-c", f"mkdir {shared_dir}/ray && echo 127.0.0.1:{port} > "
                   f"{shared_dir}/ray/ray_current_cluster")
        r = _emu("sweep", str(f), "--quick", "--cluster", "auto", "--out",
                 str(tmp_path / "out"),
                 env={"RAY_TMPDIR": str(shared_dir), "RAY_AUTH_TOKEN_PATH": str(token)},
                 timeout=120)
        assert not received.exists(), "emu connected to the planted address"
    assert r.returncode == 2, r.stderr[-3000:]
    assert "cannot be trusted" in r.stderr and "--cluster HOST:PORT" in r.stderr
    assert not (tmp_path / "out").exists()


def _plant(d: Path, how: str) -> Path:
    """Ray's address file in ``d`` (the directory stands for /tmp/ray), made as ``how``."""
    ray_dir = d / "ray"
    f = ray_dir / "ray_current_cluster"
    if how == "nobody's directory":
        _as_nobody("sh", "-c", f"mkdir {ray_dir} && chmod 755 {ray_dir}")
    else:
        ray_dir.mkdir()
        ray_dir.chmod({"world-writable directory": 0o777,
                       "sticky directory": 0o1777}.get(how, 0o755))
    if how == "nobody's file":
        ray_dir.chmod(0o777)
        _as_nobody("sh", "-c", f"echo 127.0.0.1:6379 > {f}")
        ray_dir.chmod(0o755)  # only the file's owner is wrong
    elif how == "symlink":
        target = d / "root-file"
        target.write_text("127.0.0.1:6379\n")
        f.symlink_to(target)
    elif how == "nobody's directory":
        f.write_text("127.0.0.1:6379\n")  # root's file, but nobody may replace it
    else:
        f.write_text("127.0.0.1:6379\n")
        f.chmod(0o666 if how == "world-writable file" else 0o644)
    return f


@pytest.mark.parametrize("how", ["nobody's file", "symlink", "world-writable file",
                                 "world-writable directory", "nobody's directory"])
def test_auto_trusts_no_address_file_another_user_can_write(shared_dir, how):
    f = _plant(shared_dir, how)
    with pytest.raises(EmuError, match="cannot be trusted.*; give the head's address instead: "
                       r"--cluster HOST:PORT"):
        cluster.auto_address(f)


@pytest.mark.parametrize("how", ["root's", "sticky directory"])
def test_auto_trusts_an_address_file_only_root_can_write(shared_dir, how):
    f = _plant(shared_dir, how)
    assert stat.S_IMODE(f.stat().st_mode) == 0o644
    assert cluster.auto_address(f) == "127.0.0.1:6379"


# --- joining: bounded, with a clear error -------------------------------------------------

def test_joining_a_listener_that_does_not_speak_ray_fails_in_bounded_time(tmp_path):
    f = _sweep(tmp_path)
    token = _token_file(tmp_path)
    with _listener() as (port, received):
        t0 = time.monotonic()
        r = _emu("sweep", str(f), "--cluster", f"127.0.0.1:{port}", "--out",
                 str(tmp_path / "out"), env={"RAY_AUTH_TOKEN_PATH": str(token)},
                 timeout=180)
        took = time.monotonic() - t0
    assert r.returncode == 2, r.stderr[-3000:]
    assert f"no Ray cluster answers at 127.0.0.1:{port}" in r.stderr
    assert "no answer within" in r.stderr, r.stderr[-2000:]
    assert took < 180
    # the probe carries no token: what the listener got never holds it
    assert not received.exists() or TOKEN.encode() not in received.read_bytes()
    assert not (tmp_path / "out").exists()


# --- the local cluster: loopback only, a fresh token, tasks import only the project -----

PLANTED = ("tomllib", "statistics", "json", "csv")


def test_sweep_tasks_never_import_from_the_callers_directory(tmp_path):
    """Finding 3 on Ray's side: nobody plants modules a point's task imports in a
    world-writable directory, root runs the sweep from there."""
    f = _sweep(tmp_path)
    d = Path(tempfile.mkdtemp(prefix="sae-test-cwd-", dir="/tmp"))
    try:
        d.chmod(0o777)
        for name in PLANTED:
            # Each one leaves a marker, then hands over to the real module (so the run
            # goes on as if nothing happened, as the attacker would want).
            body = ("import importlib, os, sys\n"
                    "here = os.path.dirname(os.path.abspath(__file__))\n"
                    "open(os.path.join(here, 'RAN-' + __name__), 'w').close()\n"
                    "sys.path[:] = [p for p in sys.path if os.path.abspath(p or '.') != here]\n"
                    "del sys.modules[__name__]\n"
                    "sys.modules[__name__] = importlib.import_module(__name__)\n")
            _as_nobody("sh", "-c", f"cat > {d}/{name}.py", input=body)
        r = _emu("sweep", str(f), "--out", str(tmp_path / "out"), cwd=d, timeout=600)
        ran = sorted(p.name for p in d.glob("RAN-*"))
    finally:
        shutil.rmtree(d, ignore_errors=True)
    assert r.returncode == 0, r.stderr[-3000:]
    assert ran == [], f"planted modules ran as root: {ran}"


def _listening(pids: set[int]) -> list[tuple[str, str]]:
    """(local address, process) of every TCP/UDP socket ``pids`` listen on (ss)."""
    out = subprocess.run(["ss", "-H", "-ltunp"], capture_output=True, text=True,
                         check=True).stdout
    found = []
    for line in out.splitlines():
        for pid in pids:
            if f"pid={pid}," in line:
                found.append((line.split()[4], line.split()[-1]))
    return found


def _ray_pids(token_path: str) -> set[int]:
    """Processes whose environment names ``token_path``: the head's and all it started."""
    pids = set()
    needle = f"RAY_AUTH_TOKEN_PATH={token_path}".encode()
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                env = Path(entry.path, "environ").read_bytes()
            except OSError:
                continue
            if needle in env.split(b"\0"):
                pids.add(int(entry.name))
    return pids


def test_the_local_cluster_listens_on_loopback_only_with_a_fresh_token(monkeypatch):
    import ray

    monkeypatch.setenv("RAY_AUTH_TOKEN", "not-the-local-clusters")  # ignored by it
    home = Path(tempfile.mkdtemp(prefix="sae-test-home-"))
    monkeypatch.setenv("HOME", str(home))
    try:
        with cluster.connect("local", say=lambda m: None) as info:
            assert info.temp_dir is not None
            tmp = Path(info.temp_dir)
            st = tmp.stat()
            assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o700)
            token = tmp / "token"
            assert stat.S_IMODE(token.stat().st_mode) == 0o600
            assert len(token.read_text()) == 64

            @ray.remote(num_cpus=0, resources={"fabric_slot": 1})
            def task_cwd() -> tuple[str, list[str]]:
                import sys

                return os.getcwd(), sys.path

            cwd, path = ray.get(task_cwd.remote())
            assert cwd == str(REPO)
            assert path[0] == str(REPO)  # the driver's working directory, as Ray puts it
            pids = _ray_pids(str(token)) | {os.getpid()}
            socks = _listening(pids)
            assert socks, "no Ray socket found"
            outward = [(a, p) for a, p in socks
                       if not a.startswith(("127.", "[::ffff:127.", "[::1]"))]
            assert outward == [], outward
        assert not tmp.exists()
        assert _ray_pids(str(token)) == set()
        assert not (home / ".ray").exists()  # no token file made in HOME
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_a_killed_sweep_takes_its_local_cluster_with_it(tmp_path):
    code = ("import time\n"
            "from commands.sweep.cluster import connect\n"
            "with connect('local', say=lambda m: print(m, flush=True)) as info:\n"
            "    print('READY', info.temp_dir, flush=True)\n"
            "    time.sleep(600)\n")
    p = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE,
                         text=True, start_new_session=True)
    try:
        assert p.stdout is not None
        line = ""
        while not line.startswith("READY"):
            line = p.stdout.readline()
            assert line, "the cluster did not start"
        tmp = line.split()[1]
        token = f"{tmp}/token"
        assert _ray_pids(token)
        p.send_signal(signal.SIGKILL)
        p.wait()
        # The head dies with its parent (PR_SET_PDEATHSIG), its GCS and raylet with it;
        # Ray's agents notice their raylet is gone within a minute.
        deadline = time.monotonic() + 150
        while _ray_pids(token):
            assert time.monotonic() < deadline, f"left: {_ray_pids(token)}"
            time.sleep(0.2)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    shutil.rmtree(tmp, ignore_errors=True)  # a SIGKILL runs no cleanup: its directory stays


def test_no_listener_fails_at_once(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nobody listens there
    token = _token_file(tmp_path)
    r = _emu("sweep", str(_sweep(tmp_path)), "--cluster", f"127.0.0.1:{port}", "--out",
             str(tmp_path / "out"), env={"RAY_AUTH_TOKEN_PATH": str(token)}, timeout=120)
    assert r.returncode == 2 and f"nothing answers at 127.0.0.1:{port}" in r.stderr, r.stderr
    assert not (tmp_path / "out").exists()
