"""Per-M config tables in the serving stacks' JSON format (headroom.families.tables): written and read
back, every malformed file refused in one line naming the file and what is wrong, the nearest-M
lookup as vLLM runs it, and a family's table checked against its candidates."""

from __future__ import annotations

import json

import pytest

from headroom.families import (
    CONFIG_KEYS,
    Candidate,
    ConfigTable,
    FamilyError,
    Feature,
    config_id,
    from_config_table,
    write_config_table,
)
from headroom.families.contract import check_family

SMALL = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1, "num_warps": 4,
         "num_stages": 3}  # fmt: skip
LARGE = {**SMALL, "BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 128, "GROUP_SIZE_M": 8, "num_warps": 8}


def _vllm(table: ConfigTable, m: int) -> str:
    """vLLM's lookup: the nearest of the ascending int keys, `min` keeping the first of a tie."""
    keys = [k for k, _ in table.entries]
    return dict(table.entries)[min(keys, key=lambda k: abs(k - m))]


def test_a_written_table_reads_back_in_the_ecosystems_format(tmp_path):
    path = tmp_path / "E=8,N=64,device_name=NVIDIA_H200.json"
    write_config_table(path, {64: LARGE, 1: SMALL, 16: dict(reversed(SMALL.items()))})
    text = path.read_text()
    assert text.endswith("}\n") and list(json.loads(text)) == ["1", "16", "64"]
    assert text.startswith('{\n    "1": {\n        "BLOCK_SIZE_M": 16,')
    assert list(json.loads(text)["16"]) == list(CONFIG_KEYS)
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary file left behind
    table = from_config_table(path)
    assert table.entries == ((1, config_id(SMALL)), (16, config_id(SMALL)), (64, config_id(LARGE)))
    assert table.configs == ((config_id(SMALL), SMALL), (config_id(LARGE), LARGE))
    assert table.feature == "tokens" and table.source == str(path) and len(table.blake3) == 64
    assert ConfigTable.from_record(json.loads(json.dumps(table.to_record()))) == table


def test_config_id_names_every_key_and_refuses_a_bad_config():
    assert config_id(SMALL) == "m16-n64-k128-g1-w4-s3"
    for bad, says in (
        ({k: v for k, v in SMALL.items() if k != "num_stages"}, "missing ['num_stages']"),
        ({**SMALL, "extra": 1}, "unknown ['extra']"),
        ({**SMALL, "num_warps": 0}, "num_warps must be a positive int"),
        ({**SMALL, "GROUP_SIZE_M": True}, "GROUP_SIZE_M must be a positive int"),
        ({**SMALL, "BLOCK_SIZE_K": 64.0}, "BLOCK_SIZE_K must be a positive int"),
    ):
        with pytest.raises(ValueError, match="config") as err:
            config_id(bad)
        assert says in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    "content, says",
    [
        (b'{"1": {', "not valid JSON"),
        (b"\xff\xfe\x00", "not valid JSON"),
        (b"[1, 2]", "must be a JSON object of M -> config, got list"),
        (b"{}", "holds no entry"),
        (b'{"0": {}}', "key '0' is not a positive int"),
        (b'{"01": {}}', "key '01' is not a positive int"),
        (b'{"-4": {}}', "key '-4' is not a positive int"),
        (b'{"x": {}}', "key 'x' is not a positive int"),
        (b'{"1": 5}', "M=1: must be an object"),
        (b'{"1": {"BLOCK_SIZE_M": 16}}', "M=1: keys must be exactly"),
        (
            json.dumps({"2": SMALL, "8": {**SMALL, "num_stages": 0}}).encode(),
            "M=8: num_stages must be a positive int",
        ),
        (json.dumps({"2": {**SMALL, "comment": "x"}}).encode(), "M=2: keys must be exactly"),
        (b'{"1": {}, "1": {}}', "key '1' repeats"),
    ],
)
def test_a_malformed_table_is_refused_in_one_line_naming_the_file(tmp_path, content, says):
    path = tmp_path / "table.json"
    path.write_bytes(content)
    with pytest.raises(ValueError) as err:
        from_config_table(path)
    message = str(err.value)
    assert says in message and str(path) in message and "\n" not in message


def test_an_unreadable_table_is_refused_in_one_line(tmp_path):
    for path in (tmp_path / "absent.json", tmp_path):
        with pytest.raises(ValueError, match="cannot read it") as err:
            from_config_table(path)
        assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_writing_refuses_a_bad_table_and_leaves_the_file_as_it_was(tmp_path):
    path = tmp_path / "t.json"
    path.write_text("before")
    for table, says in (
        ({}, "holds no entry"),
        ({0: SMALL}, "key 0"),
        ({4: {**SMALL, "num_warps": -1}}, "M=4"),
    ):
        with pytest.raises(ValueError, match=says):
            write_config_table(path, table)
    assert path.read_text() == "before" and len(list(tmp_path.iterdir())) == 1


def test_the_nearest_m_is_vllms_ties_to_the_smaller_key(tmp_path):
    path = tmp_path / "t.json"
    write_config_table(path, {4: SMALL, 16: LARGE, 64: SMALL, 96: LARGE})
    table = from_config_table(path)
    small, large = config_id(SMALL), config_id(LARGE)
    # below the smallest, a tie (10: 4 and 16), either side of one, above the largest
    cases = {
        1: small,
        4: small,
        10: small,
        11: large,
        40: large,
        41: small,
        80: small,
        81: large,
        10**6: large,
    }
    assert {m: table.choose(m) for m in cases} == cases
    assert all(table.choose(m) == _vllm(table, m) for m in range(1, 200))


def test_config_keys_are_the_kernels():
    from kernels import moe

    assert CONFIG_KEYS == moe.CONFIG_KEYS


class _Family:
    """A family with a config table, for the contract's check of it."""

    name, version = "tabled", "1"

    def __init__(self, table, ids, features=None):
        self.config_table, self._ids = table, ids
        self.features = features or {"tokens": Feature("int", min=1), "dtype": Feature("category")}

    def candidates(self):
        return [Candidate(i) for i in self._ids]

    shapes = supports = inputs = prepare = reference = tolerance = cost = lambda *a, **k: None


def test_the_contract_checks_a_familys_table_against_its_candidates_and_features(tmp_path):
    path = tmp_path / "t.json"
    write_config_table(path, {1: SMALL, 64: LARGE})
    table = from_config_table(path)
    check_family(_Family(table, [config_id(SMALL), config_id(LARGE), "native"]))
    check_family(_Family(None, ["native"]))
    for family, says in (
        (_Family(table, [config_id(SMALL)]), f"names configs that are not candidates: {config_id(LARGE)}"),
        (_Family({"1": SMALL}, [config_id(SMALL)]), "config_table must be a headroom.families.ConfigTable"),
        (_Family(from_config_table(path, feature="dtype"), [config_id(SMALL), config_id(LARGE)]),
         "keyed on 'dtype', not a declared int feature"),
    ):  # fmt: skip
        with pytest.raises(FamilyError, match="family 'tabled'") as err:
            check_family(family)
        assert says in str(err.value) and "\n" not in str(err.value)


def test_a_familys_identity_records_its_table_only_when_it_has_one(tmp_path):
    from headroom.families.loading import Loaded

    path = tmp_path / "t.json"
    write_config_table(path, {1: SMALL})
    tabled = Loaded(_Family(from_config_table(path), [config_id(SMALL)]), "m:F", "0" * 64, ())
    plain = Loaded(_Family(None, ["native"]), "m:F", "0" * 64, ())
    assert tabled.identity()["config_table"] == from_config_table(path).to_record()
    assert "config_table" not in plain.identity()


def test_captured_by_must_name_a_capture_fixed_padded_int_feature_and_is_recorded():
    from headroom.families.loading import Loaded

    padded = {"tokens": Feature("int", capture_fixed=True, pad_to=[1, 8, 512], min=1),
              "kv": Feature("int", min=1), "dtype": Feature("category", capture_fixed=True)}  # fmt: skip
    family = _Family(None, ["native"], padded)
    family.captured_by = "tokens"
    check_family(family)
    assert Loaded(family, "m:F", "0" * 64, ()).identity()["captured_by"] == "tokens"
    assert "captured_by" not in Loaded(_Family(None, ["native"]), "m:F", "0" * 64, ()).identity()
    for name in ("kv", "dtype", "absent", 3):
        family.captured_by = name
        with pytest.raises(
            FamilyError, match="family 'tabled'.*captured_by must name a declared capture-fixed"
        ):
            check_family(family)
