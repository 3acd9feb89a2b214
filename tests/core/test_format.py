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


@pytest.mark.parametrize("tiny", [-0.0, -0.0001, -0.0004])
def test_no_writer_prints_a_negative_zero(tiny):
    assert f.number_format([tiny, 1.25])(tiny) == "0.00"
    assert f.signed_range([tiny, 0.0002]) == "0.000%"
    assert f.signed_interval(tiny, 1.0) == "[0.000, +1.000]%"
    assert f.estimate_ci(tiny, tiny, 0.5, "%") == "0.00% [0.00, +0.50]"
    assert f.estimate_ci(1.0, 1.0 + tiny, 1.0, "x") == "1.000× [1.000, 1.000]"


def test_an_estimate_with_its_ci_in_its_unit():
    assert f.estimate_ci(7.33, 2.994, 11.666, "%") == "+7.33% [+2.99, +11.67]"
    assert f.estimate_ci(1.0834, 0.763, 1.0015, "x") == "1.083× [0.763, 1.002]"
    assert f.estimate_ci(646.23, 640.1, 650.34, "us") == "646.2 µs [640.1, 650.3]"
    assert f.estimate_ci(1.2, float("nan"), 1.3, "%") == "+1.20% (no CI)"
    assert f.estimate_ci(float("nan"), 0, 1, "%") == "n/a"
    with pytest.raises(ValueError, match="unknown unit 'ms'"):
        f.estimate_ci(1.0, 0.5, 1.5, "ms")


def test_rates_durations_and_headers_say_their_unit():
    assert f.rate(3.2e12, "B/s") == "3.20 TB/s"
    assert f.rate(5.1e14, "FLOP/s") == "510 TFLOP/s"
    assert f.seconds(12.34) == "12.3 s" and f.seconds(0.00105) == "1.05 ms" and f.seconds(4.2e-5) == "42.0 µs"
    assert f.header("median_us") == "median (µs)"
    assert f.header("gain_vs_global_pct") == "gain vs global (%)"
    assert f.header("working_set_bytes") == "working set" and f.header("shape_key") == "shape key"
    assert f.column_format("cache_bytes", [1.0])(60 * 2**20) == "60.00 MiB"
    assert f.column_format("rows", [1, 2])(20000) == "20,000"


def test_a_difference_is_signed_in_its_own_unit():
    assert f.delta(0.123) == "+0.12 pp" and f.delta(-0.05, "x") == "-0.050×"
    assert f.delta(1.5, "us") == "+1.5 µs" and f.delta(-0.001, "us", digits=2) == "0.00 µs"  # never -0.00
    assert f.delta_ci(1.0, 0.1, 2.36) == "+1.00 pp [+0.10, +2.36]"
    assert f.delta_ci(11.82, 2.19, 30.81, "us", digits=2) == "+11.82 µs [+2.19, +30.81]"
    assert f.delta(float("nan")) == "n/a" and f.delta_ci(1.0, None, 2.0) == "n/a"
