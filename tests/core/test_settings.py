"""Stage settings: the shared merge and integer checks every measurement stage uses."""

import pytest

from headroom.core import settings as stage_settings
from headroom.families.attention import graph_sweep
from headroom.measure import calibrate, lifecycle, portfolio


def test_merge_keeps_defaults_and_names_unknown_keys():
    assert stage_settings.merge("s", {"a": 1, "b": 2}, {"b": 3}) == {"a": 1, "b": 3}
    assert stage_settings.merge("s", {"a": 1}, None) == {"a": 1}
    with pytest.raises(ValueError, match=r"s: unknown key\(s\) \['c'\]"):
        stage_settings.merge("s", {"a": 1}, {"c": 0})


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "2"])
def test_require_ints_names_the_key_and_refuses_non_ints(value):
    with pytest.raises(ValueError, match=r"s\.reps must be an int >= 1"):
        stage_settings.require_ints("s", {"reps": value}, [("reps", 1)])


@pytest.mark.parametrize(
    "module, key",
    [(portfolio, "reps"), (lifecycle, "switch_reps"), (graph_sweep, "reps"), (calibrate, "reps")],
)
def test_every_stage_refuses_a_bad_int_and_an_unknown_key(module, key):
    name = module.__name__.split(".")[-1]
    with pytest.raises(ValueError, match=rf"{name}\.{key} must be an int >= 1"):
        module.settings({key: 0})
    with pytest.raises(ValueError, match=rf"{name}: unknown key"):
        module.settings({"bogus": 1})
