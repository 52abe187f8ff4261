"""emu/typedjson.py: records to JSON-able data and back through their type hints; a bad
key or value is a ValueError naming its path."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

import pytest

from emu.typedjson import build, plain


@dataclass(frozen=True)
class Inner:
    a: int
    b: float = 1.0


@dataclass(frozen=True)
class Other:
    c: str


@dataclass(frozen=True)
class Outer:
    items: tuple[Inner, ...]
    by_rank: Mapping[int, tuple[str, ...]]
    either: Inner | Other
    maybe: float | None = None
    names: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if not self.items:
            raise ValueError("at least one item")


def _round_trip(rec: Outer) -> Outer:
    return build(Outer, json.loads(json.dumps(plain(rec))), "Outer")


def test_records_round_trip_with_their_types():
    rec = Outer(items=(Inner(1), Inner(2, 0.5)), by_rank={0: ("x",), 3: ("y", "z")},
                either=Other("o"), maybe=2.0, names=("n",))
    back = _round_trip(rec)
    assert back == rec
    assert list(back.by_rank) == [0, 3]  # JSON's string keys come back as ints
    assert type(back.either) is Other and type(back.items[1].b) is float


def test_a_union_of_records_picks_the_one_whose_fields_it_has():
    rec = Outer(items=(Inner(1),), by_rank={}, either=Inner(4, 2.0))
    assert type(_round_trip(rec).either) is Inner


@pytest.mark.parametrize("data, needle", [
    ({"items": [{"a": 1}], "by_rank": {}, "either": {"c": "o"}, "extra": 1},
     "Outer: unknown keys ['extra']"),
    ({"items": [{"a": 1}], "by_rank": {}}, "Outer: required keys ['either'] missing"),
    ({"items": [{"a": "1"}], "by_rank": {}, "either": {"c": "o"}},
     "Outer.items[0].a = '1': must be int"),
    ({"items": [{"a": 1}], "by_rank": {"0": [5]}, "either": {"c": "o"}},
     "Outer.by_rank[0][0] = 5: must be str"),
    ({"items": {"a": 1}, "by_rank": {}, "either": {"c": "o"}}, "Outer.items = {'a': 1}: "
     "must be an array"),
    ({"items": [{"a": 1}], "by_rank": [], "either": {"c": "o"}},
     "Outer.by_rank = []: must be an object"),
    ({"items": [{"a": 1}], "by_rank": {}, "either": None}, "Outer.either: must not be null"),
    ({"items": [{"a": 1}], "by_rank": {}, "either": {"c": "o"}, "maybe": True},
     "Outer.maybe = True: must be float"),
    ({"items": [], "by_rank": {}, "either": {"c": "o"}}, "Outer: at least one item"),
    ([1], "Outer: must be an object, not list"),
])
def test_bad_data_is_refused_naming_its_path(data, needle):
    with pytest.raises(ValueError) as info:
        build(Outer, data, "Outer")
    assert needle in str(info.value)
