"""Claim files: every shipped one loads and passes its kind's check; bad ones are refused
with the file, the key and what is valid."""

from __future__ import annotations

from pathlib import Path

import pytest

from commands.reproduce.claim import ClaimSpecError
from commands.reproduce.kinds import KINDS
from commands.reproduce.spec import CLAIMS_DIR, claim_files, load_all, load_selected, parse

GOOD = '''
paper = "MRC"
title = "Spraying removes flow collisions"
statement = """Sprayed   traffic
collides less."""
kind = "spraying"
repetitions = 3

[params]
rate_mbit = 5.0
queue_packets = 64
hosts_per_leaf = 4
bytes_per_host = 1000
patterns = ["permutation", "all_to_all"]
systems = ["mrc", "rc", "tcp"]
deadline_s = 60.0

[quick]
bytes_per_host = 100
'''


def _write(tmp_path: Path, text: str, name: str = "claim.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_every_shipped_claim_file_loads_and_passes_its_kind() -> None:
    files = claim_files()
    assert {"spraying", "explorer"} <= {f.stem for f in files}
    specs = load_all(KINDS)
    assert {s.id for s in specs} == {f.stem for f in files}
    papers = [s.paper for s in specs]
    assert papers == sorted(papers, key=("MRC", "DBLP", "Explorer").index)  # paper order
    for s in specs:
        assert s.repetitions >= 3
        KINDS[s.kind].check(s.effective_params(True))


def test_good_file_parses_and_quick_overrides(tmp_path: Path) -> None:
    spec = parse(_write(tmp_path, GOOD), KINDS)
    assert (spec.id, spec.paper, spec.kind, spec.repetitions) == ("claim", "MRC", "spraying", 3)
    assert spec.statement == "Sprayed traffic collides less."
    assert spec.effective_params(False)["bytes_per_host"] == 1000
    assert spec.effective_params(True)["bytes_per_host"] == 100
    assert spec.effective_params(True)["rate_mbit"] == 5.0


@pytest.mark.parametrize(("old", "new", "message"), [
    ('repetitions = 3', 'repetitions = 3\ncolour = "red"', "unknown key 'colour'"),
    ('repetitions = 3', 'repetitions = 2', "repetitions = 2 is invalid: must be an integer >= 3"),
    ('repetitions = 3', 'repetitions = "3"', "repetitions = '3' is invalid"),
    ('repetitions = 3', 'repetitions = true', "repetitions = True is invalid"),
    ('kind = "spraying"', 'kind = "sprayin"', "kind = 'sprayin' is unknown: valid kinds are"),
    ('paper = "MRC"', 'paper = "RDMA"', "paper = 'RDMA' is invalid: must be one of MRC, DBLP"),
    ('title = "Spraying removes flow collisions"', 'title = 3', "title = 3 is invalid"),
    ('kind = "spraying"\n', '', "missing key 'kind'"),
    ('rate_mbit = 5.0', 'rate_mbit = -5.0', "[params] rate_mbit = -5.0 is invalid: must be"),
    ('rate_mbit = 5.0', 'rate_mbit = "fast"', "rate_mbit = 'fast' is invalid"),
    ('queue_packets = 64', 'queue_packets = 64\nqueue = 3', "unknown parameter 'queue'"),
    ('deadline_s = 60.0', '', "missing parameter 'deadline_s'"),
    ('systems = ["mrc", "rc", "tcp"]', 'systems = ["rc", "tcp"]', "systems = ['rc', 'tcp']"),
    ('patterns = ["permutation", "all_to_all"]', 'patterns = ["ring"]', "patterns = ['ring']"),
    ('\nbytes_per_host = 100\n', '\nbytes_per_host = 0\n',
     "[quick] bytes_per_host = 0 is invalid"),
    ('[quick]', '[quick]\nnope = 1', "[quick] unknown parameter 'nope'"),
    ('repetitions = 3', 'repetitions = 3 3', "not valid TOML"),
])
def test_bad_files_name_file_key_and_what_is_valid(tmp_path: Path, old: str, new: str,
                                                   message: str) -> None:
    assert old in GOOD
    path = _write(tmp_path, GOOD.replace(old, new, 1))
    with pytest.raises(ClaimSpecError) as e:
        parse(path, KINDS)
    assert str(e.value).startswith(f"{path}: ")
    assert message in str(e.value)


def test_params_and_quick_must_be_tables(tmp_path: Path) -> None:
    head = GOOD.split("[params]")[0]
    with pytest.raises(ClaimSpecError, match="quick = 3 is invalid: must be a table"):
        parse(_write(tmp_path, head + "quick = 3\n"), KINDS)


def test_explorer_fixed_keys_must_be_axes_of_its_grid(tmp_path: Path) -> None:
    text = (CLAIMS_DIR / "explorer.toml").read_text()
    ok = parse(_write(tmp_path, text, "explorer.toml"), KINDS)
    assert ok.effective_params(True)["fixed"] == {"dci.pair_tbps": 100.0,
                                                  "model.preset": "llama3-70b"}
    bad = text.replace('"model.preset" = "llama3-70b"', '"model.size" = 3')
    with pytest.raises(ClaimSpecError, match=r"\[quick\] fixed.model.size is not an axis"):
        parse(_write(tmp_path, bad, "explorer.toml"), KINDS)
    bad = text.replace('grid = "experiments/explore/speedup_grid.toml"', 'grid = "no.toml"')
    with pytest.raises(ClaimSpecError, match="grid = 'no.toml' is invalid: must be an explore"):
        parse(_write(tmp_path, bad, "explorer.toml"), KINDS)


def test_selection_checks_every_named_claim_and_names_the_valid_ones(tmp_path: Path) -> None:
    _write(tmp_path, GOOD, "b.toml")
    _write(tmp_path, GOOD.replace('paper = "MRC"', 'paper = "DBLP"'), "a.toml")
    assert [s.id for s in load_selected([], KINDS, tmp_path)] == ["b", "a"]  # paper order
    assert [s.id for s in load_selected(["a", "b", "a"], KINDS, tmp_path)] == ["a", "b"]
    with pytest.raises(ClaimSpecError, match="claim 'c' is unknown: valid claims are a, b"):
        load_selected(["c"], KINDS, tmp_path)
    _write(tmp_path, GOOD.replace("repetitions = 3", "repetitions = 1"), "c.toml")
    with pytest.raises(ClaimSpecError, match="c.toml: repetitions = 1"):
        load_selected([], KINDS, tmp_path)  # a bad file stops the run before anything runs
    with pytest.raises(ClaimSpecError, match="no claim files"):
        load_selected([], KINDS, tmp_path / "empty")


def test_a_claim_file_is_selected_by_path(tmp_path: Path) -> None:
    stock = tmp_path / "stock"
    stock.mkdir()
    _write(stock, GOOD, "a.toml")
    mine = tmp_path / "mine"
    mine.mkdir()
    copy = _write(mine, GOOD.replace('paper = "MRC"', 'paper = "DBLP"'), "a_fast.toml")
    specs = load_selected(["a", str(copy)], KINDS, stock)
    assert [(s.id, s.paper) for s in specs] == [("a", "MRC"), ("a_fast", "DBLP")]
    with pytest.raises(ClaimSpecError, match="claim file 'mine/none.toml' does not exist"):
        load_selected(["mine/none.toml"], KINDS, stock)
    same_stem = _write(mine, GOOD, "a.toml")
    with pytest.raises(ClaimSpecError, match="share the id 'a'.*rename one"):
        load_selected(["a", str(same_stem)], KINDS, stock)
    # the same file twice, by id and by path, is one claim
    assert [s.id for s in load_selected(["a", str(stock / "a.toml")], KINDS, stock)] == ["a"]
    bad = _write(mine, GOOD.replace("repetitions = 3", "repetitions = 2"), "b.toml")
    with pytest.raises(ClaimSpecError, match="b.toml: repetitions = 2"):
        load_selected([str(bad)], KINDS, stock)
