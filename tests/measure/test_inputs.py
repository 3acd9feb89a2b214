"""What attention's measuring stages build their inputs from (families/attention/inputs.py): the
trace rows checked, the (q, k, v) sets they turn into."""

import numpy as np
import pytest

from headroom.families.attention import inputs
from tests.measure.measure_helpers import tiny_trace


def test_inputs_follow_the_trace_row():
    row = next(tiny_trace().itertuples(index=False))
    sets = inputs.input_sets(row, 2, "interpret", seed=1)
    q, k, v = sets[0]
    assert q.shape == (1, 2, 16, 32) and k.shape == v.shape == (1, 1, 16, 32)
    assert str(q.dtype) == "torch.float32"
    assert not np.array_equal(sets[0][1].numpy(), sets[1][1].numpy())  # distinct sets
    assert (q != 0).all()
    assert inputs.set_bytes(row) == (2 * 16 * 32 + 2 * 16 * 32) * 4


def test_a_bad_trace_row_is_named():
    bad = tiny_trace()
    bad.loc[0, "kv_len"] = bad.loc[0, "q_len"] - 1  # q_len < kv_len is a chunk over a cache; > is not
    with pytest.raises(ValueError, match="invocation 0.*q_len <= kv_len"):
        inputs.check_trace(bad)
    bad = tiny_trace()
    bad.loc[1, "q_len"] = 2
    with pytest.raises(ValueError, match="invocation 1.*decode"):
        inputs.check_trace(bad)
