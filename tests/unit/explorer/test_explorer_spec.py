"""Explore files: axes, presets, and errors that name the file, the key and what is valid."""

from __future__ import annotations

import pytest

from explorer.spec import SpecError
from explorer.specfile import describe_keys, load, parse, parse_override


def _doc(**tables):
    return {"name": "t", "model": {"preset": "llama3-8b"}, **tables}


def test_lists_are_axes_and_presets_fill_the_rest():
    space = parse(_doc(placement={"tp": [1, 2, 8], "pp": 2}, cluster={"dcs": [1, 2]}))
    assert space.size == 6
    assert {a.key for a in space.axes} == {"placement.tp", "cluster.dcs"}
    cfg = space.config({"placement.tp": 8})
    assert (cfg.placement.tp, cfg.placement.pp, cfg.cluster.dcs) == (8, 2, 1)
    assert (cfg.model.layers, cfg.model.hidden, cfg.model.kv) == (32, 4096, 8)
    assert cfg.model.batch_seqs == 4 * 2**20 // 8192


def test_a_preset_axis_changes_every_field_it_sets():
    space = parse({"name": "t", "model": {"preset": ["llama3-8b", "gpt3-175b"], "seq": 2048,
                                          "global_batch_seqs": 512}})
    a, b = space.points()
    assert (a.model.layers, b.model.layers) == (32, 96)
    assert a.model.seq == b.model.seq == 2048  # the file's key wins over the preset


def test_dc_gpus_axis_is_a_list_of_lists():
    space = parse(_doc(cluster={"dcs": 2, "dc_gpus": [[1024, 512], [2048, 2048]]}))
    assert [c.cluster.gpus for c in space.points()] == [(1024, 512), (2048, 2048)]
    fixed = parse(_doc(cluster={"dcs": 2, "dc_gpus": [1024, 512]}))
    assert fixed.size == 1 and fixed.config().cluster.gpus == (1024, 512)


@pytest.mark.parametrize("doc, words", [
    (_doc(placement={"tpp": 2}), ["placement.tpp", "valid keys", "tp"]),
    (_doc(bogus={}), ["bogus", "valid keys"]),
    (_doc(placement={"tp": 0}), ["placement.tp = 0", "integer >= 1"]),
    (_doc(placement={"tp": [1, "x"]}), ["placement.tp = 'x'", "integer"]),
    (_doc(placement={"tp": []}), ["placement.tp", "at least one value"]),
    (_doc(placement={"tp": [2, 2]}), ["repeated"]),
    (_doc(dci={"loss": 0.9}), ["dci.loss = 0.9", "[0, 0.5]"]),
    (_doc(schedule={"pipeline": "zb"}), ["schedule.pipeline", "'gpipe'", "'interleaved'"]),
    (_doc(gpu={"preset": "tpu"}), ["gpu.preset", "'h100-sxm'"]),
    ({"name": "t", "model": {"heads": [32, 48], "hidden": 4096, "global_batch_seqs": 1}},
     ["model.heads = 48", "divide hidden", "at model.heads = 48"]),
    ({"name": "t", "model": {"global_batch_seqs": 8, "global_batch_tokens": 8192}},
     ["exactly one of"]),
    (_doc(cluster={"dcs": 3, "dc_gpus": [8, 8]}), ["cluster.dc_gpus", "cluster.dcs = 3"]),
    ({"model": {}}, ["name"]),
])
def test_errors_name_the_key_and_the_valid_range(doc, words):
    with pytest.raises(SpecError) as e:
        parse(doc, "f.toml")
    msg = str(e.value)
    assert msg.startswith("f.toml: ")
    for w in words:
        assert w in msg, (w, msg)


def test_load_with_overrides_and_file_errors(tmp_path):
    f = tmp_path / "x.toml"
    f.write_text('name = "x"\n[model]\npreset = "llama3-8b"\n[placement]\ntp = [1, 2]\n')
    space = load(f, ["placement.tp=[4,8]", "network.transport=rc"])
    assert space.axis("placement.tp").values == (4, 8)
    assert space.fixed["network.transport"] == "rc"
    with pytest.raises(SpecError, match="unknown table"):
        load(f, ["nope.x=1"])
    with pytest.raises(SpecError, match="does not exist"):
        load(tmp_path / "missing.toml")
    (tmp_path / "bad.toml").write_text("name = [")
    with pytest.raises(SpecError, match="not valid TOML"):
        load(tmp_path / "bad.toml")
    assert parse_override("schedule.pipeline=1f1b") == ("schedule.pipeline", "1f1b")
    with pytest.raises(SpecError, match="KEY=VALUE"):
        parse_override("placement.tp")


def test_every_shipped_explore_file_loads():
    from pathlib import Path

    files = sorted(Path("experiments/explore").glob("*.toml"))
    assert files
    for f in files:
        assert load(f).size >= 1


def test_keys_reference_lists_every_table():
    text = describe_keys()
    for table in ("[model]", "[gpu]", "[cluster]", "[fabric]", "[dci]", "[placement]",
                  "[schedule]", "[network]", "[cost]"):
        assert table in text
    assert "dblp_tolerance" in text and "oversubscription" in text
