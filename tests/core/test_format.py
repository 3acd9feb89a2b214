"""The one number formatter: what a reader of the report, the cross-study page and the CLI sees."""

import math

import pytest

from headroom.core import format as f


@pytest.mark.parametrize("value", [-0.0, -0.0001, 0.0004])
def test_a_percentage_that_rounds_to_zero_is_never_negative_zero(value):
    assert f.pct(value) == "0.00%"
    assert f.pct_ci(value, value) == "[0.00, 0.00]%"


def test_units_are_written_as_units():
    assert f.us(646.23) == "646.2 µs"
    assert f.us(37390.0) == "37,390 µs"
    assert f.speedup(1.0834) == "1.083×"
    assert f.nbytes(60 * 2**20) == "60.00 MiB"
    assert f.nbytes(512) == "512 B"
    assert f.pct(1.1234) == "+1.12%" and f.pct(1.1234, signed=False) == "1.12%"


@pytest.mark.parametrize("missing", [None, math.nan])
def test_missing_values_read_n_a(missing):
    assert {f.pct(missing), f.us(missing), f.speedup(missing), f.nbytes(missing), f.pct_ci(missing, 1)} == {
        "n/a"
    }


def test_a_column_gets_one_format():
    """Decimals follow the column's largest value (4 significant digits), the same on every row."""
    write = f.number_format([37390.0, 3.25])
    assert [write(37390.0), write(3.25)] == ["37,390", "3"]
    write = f.number_format([1.5, 0.25])
    assert [write(1.5), write(0.25)] == ["1.50", "0.25"]
