"""What the experiment-file tests share: the check that a document is refused."""

import pytest

from emu.errors import EmuError
from workloads import experiment as ex


def fails(data: dict, *needles: str) -> str:
    """``data`` is refused with an error naming the file and containing every needle."""
    with pytest.raises(EmuError) as info:
        ex.parse(data, "exp.toml")
    msg = str(info.value)
    assert msg.startswith("exp.toml: "), msg
    for n in needles:
        assert n in msg, f"{n!r} not in {msg!r}"
    return msg
