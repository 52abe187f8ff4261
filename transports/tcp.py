"""The kernel-TCP baseline: the same messages over plain TCP sockets (one per peer pair).

Framing: a 16-byte prefix (message id, size) then the bytes. The receiver reads
straight into the message's buffer. ECMP hashes each connection's 5-tuple once.
"""

from __future__ import annotations

import hashlib
import resource
import selectors
import socket
import struct
import time

TCP_PORT = 4792
_PREFIX = struct.Struct("!QQ")


def run_tcp(plan: dict, message_bytes, start) -> dict:
    """Run a driver plan over TCP; ``start()`` blocks until the common start time."""
    addr = plan["addr"]
    t_setup = time.monotonic()
    deadline = t_setup + plan.get("deadline_s", 60.0)
    sel = selectors.DefaultSelector()
    lst = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lst.bind((addr, TCP_PORT))
    lst.listen(64)
    lst.setblocking(False)
    sel.register(lst, selectors.EVENT_READ, "listen")
    recvs = {(r["conn"], r["msg"]): r for r in plan.get("recvs", [])}
    bufs = {k: bytearray(r["size"]) for k, r in recvs.items()}
    conn_peer = {c["conn"]: c for c in plan["conns"]}
    by_conn: dict[int, list[tuple[dict, bytes]]] = {}
    for s in plan.get("sends", []):
        by_conn.setdefault(s["conn"], []).append((s, message_bytes(s["seed"], s["size"])))
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = start()
    for conn, items in by_conn.items():
        peer = conn_peer[conn]
        s = socket.create_connection((peer["peer_addr"], TCP_PORT), timeout=10,
                                     source_address=(addr, 0))
        s.setblocking(False)
        out = b"".join(_PREFIX.pack(m["msg"], len(data)) + data for m, data in items)
        sel.register(s, selectors.EVENT_WRITE, ["send", conn, memoryview(out), 0, items])
    done: list[dict] = []
    pending = len(recvs) + sum(len(v) for v in by_conn.values())
    while pending and time.monotonic() < deadline:
        for key, _ in sel.select(timeout=0.05):
            st = key.data
            if st == "listen":
                c, _ = lst.accept()
                c.setblocking(False)
                sel.register(c, selectors.EVENT_READ, ["recv", bytearray(), None, 0])
            elif st[0] == "send":
                _, conn, out, off, items = st
                try:
                    off += key.fileobj.send(out[off:off + (1 << 20)])
                except BlockingIOError:
                    continue
                st[3] = off
                if off == len(out):
                    now = time.monotonic()
                    for m, data in items:
                        done.append({"conn": conn, "msg": m["msg"], "kind": "send", "ok": True,
                                     "bytes": len(data), "t": round(now - t0, 6)})
                        pending -= 1
                    sel.unregister(key.fileobj)
            else:
                pending -= _read(key.fileobj, st, recvs, bufs, done, t0, message_bytes, sel)
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    for k, r in recvs.items():
        if not any(d["kind"] == "recv" and (d["conn"], d["msg"]) == k for d in done):
            done.append({"conn": k[0], "msg": k[1], "kind": "recv", "ok": False,
                         "error": "deadline", "bytes": r["size"]})
    for key in list(sel.get_map().values()):
        key.fileobj.close()
    return {"host": plan["host"], "transport": "tcp", "t0": t0, "messages": done,
            "timeline": [], "cpu_s": round((cpu1.ru_utime - cpu0.ru_utime)
                                           + (cpu1.ru_stime - cpu0.ru_stime), 4),
            "sent_per_ev": {}, "stats": {}, "unknown_conn": 0}


def _read(sock, st, recvs, bufs, done, t0, message_bytes, sel) -> int:
    """Read what is there; place it; return how many messages completed."""
    completed = 0
    while True:
        try:
            chunk = sock.recv(1 << 20)
        except BlockingIOError:
            return completed
        if not chunk:
            sel.unregister(sock)
            sock.close()
            return completed
        head, cur, got = st[1], st[2], st[3]
        view = memoryview(chunk)
        while view:
            if cur is None:  # reading a prefix
                need = _PREFIX.size - len(head)
                head += view[:need]
                view = view[need:]
                if len(head) < _PREFIX.size:
                    break
                msg, size = _PREFIX.unpack(head)
                head.clear()
                conn = next(c for (c, m) in bufs if m == msg)
                cur, got = (conn, msg, size), 0
            conn, msg, size = cur
            take = min(size - got, len(view))
            bufs[(conn, msg)][got:got + take] = view[:take]
            got += take
            view = view[take:]
            if got == size:
                r = recvs[(conn, msg)]
                ok = hashlib.sha256(bufs[(conn, msg)]).digest() == hashlib.sha256(
                    message_bytes(r["seed"], r["size"])).digest()
                done.append({"conn": conn, "msg": msg, "kind": "recv", "ok": True,
                             "bytes": size, "t": round(time.monotonic() - t0, 6),
                             "sha256_ok": ok})
                completed += 1
                cur, got = None, 0
        st[2], st[3] = cur, got
