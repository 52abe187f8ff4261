# Types of the compiled transports/native/batchio.pyx.
import socket

SO_TIMESTAMPNS: int

def enable_timestamps(sock: socket.socket) -> None: ...
def sockaddr(addr: str, port: int) -> bytes: ...

class RxBatch:
    vlen: int
    slot: int
    def __init__(self, vlen: int = 64, slot: int = 9216) -> None: ...
    def recv(self, fd: int) -> list[tuple[int, memoryview, float]]: ...

class TxBatch:
    vlen: int
    tclass: int
    data_given: int
    def __init__(self, vlen: int, tclass: int, kind_at: int, flags_at: int, data_kind: int,
                 data_flag: int) -> None: ...
    def send(self, fd: int, dest: bytes, datagrams: list[bytes | bytearray]) -> int: ...
