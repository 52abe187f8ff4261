"""What the transport core tests share: two cores on the fake network, test messages,
and the check that every message arrived byte-exact at both ends."""

import random

from transports.testing.fakenet import FakeNet


def connect_pair(a, b, specs, seed):
    """Cores ``a`` and ``b`` joined by one fake-network path per spec (EV)."""
    net = FakeNet(seed)
    net.connect("a", a, "b", b, list(specs))
    return net, a, b


def messages(seed: int, sizes: list[int]) -> dict[int, bytes]:
    """Messages 1..n of the given sizes, random bytes from ``seed``."""
    r = random.Random(seed)
    return {i + 1: r.randbytes(n) for i, n in enumerate(sizes)}


def check_all(net, msgs: dict[int, bytes], bufs: dict[int, bytearray]) -> None:
    """Every message completed at both ends and its buffer holds exactly its bytes."""
    assert sorted(c.msg for c in net.done["a"] if c.ok) == sorted(msgs)
    assert sorted(c.msg for c in net.done["b"] if c.ok) == sorted(msgs)
    for m, d in msgs.items():
        assert bufs[m] == d, f"message {m} differs"
