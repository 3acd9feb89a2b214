"""The synthetic request log's lognormal lengths (trace.synthetic.lengths, issue 19)."""

import numpy as np
import pytest

from headroom.core import defaults
from headroom.trace import invocations as trace

PART = {"heads_q": 32, "heads_kv": 8, "head_dim": 128, "dtype": "bfloat16"}
LOGNORMAL = {"lengths": "lognormal", "prompt_tokens": [16, 4096], "generated_tokens": [2, 256]}


def _requests(n: int = 20_000, **kw):
    syn = {**defaults.section("trace")["synthetic"], **LOGNORMAL, "requests": n, **kw}
    return trace.synthetic_requests(syn, seed=0)


def test_lognormal_lengths_have_the_stated_median_and_sigma_within_the_clip():
    req = _requests()
    syn = defaults.section("trace")["synthetic"]
    assert np.median(req.context) == pytest.approx(syn["prompt_median"], rel=0.05)
    assert np.median(req.generated) == pytest.approx(syn["generated_median"], rel=0.05)
    inner = req.context[(req.context > 16) & (req.context < 4096)]
    assert np.log(inner).std() == pytest.approx(syn["prompt_sigma"], rel=0.15)  # clipping trims the tails
    assert req.context.min() >= 16 and req.context.max() == 4096 and req.generated.max() == 256
    assert len(np.unique(req.context)) > 1000  # not four prompt lengths
    np.testing.assert_array_equal(req.context, _requests().context)  # seeded


def test_choice_stays_the_recorded_references_log():
    """`choice` with the recorded references' settings draws exactly what it drew before the
    lognormal option existed (so data/reference/h200/default*/ stay reproducible)."""
    recorded = {"requests": 64, "mean_gap_s": 0.1, "prompt_tokens": [128, 512, 1024, 2048]}
    syn = {
        **defaults.section("trace")["synthetic"],
        "lengths": "choice",
        **recorded,
        "generated_tokens": [2, 32],
    }
    rng = np.random.default_rng(0)
    gaps = rng.exponential(syn["mean_gap_s"], size=syn["requests"])
    context = rng.choice(np.asarray(syn["prompt_tokens"]), size=syn["requests"])
    req = trace.synthetic_requests(syn, seed=0)
    assert req.context.tolist() == context.tolist() and req.arrival_ns[1] == round(gaps[1] * 1e9)


def test_a_longer_lognormal_trace_brings_more_shapes_and_stays_chronological():
    cfg = {"synthetic": {**LOGNORMAL, "requests": 128, "mean_gap_s": 0.18}}
    short = trace.build_trace({**cfg, "invocations": 48}, PART)
    long = trace.build_trace({**cfg, "invocations": 240}, PART)
    assert long["shape_key"].nunique() > 2 * short["shape_key"].nunique()
    assert long["arrival_s"].is_monotonic_increasing and long["invocation"].tolist() == list(range(240))
    half = len(long) // 2  # the chronological train/test split: test shapes mostly new to train
    assert long["shape_key"].iloc[half:].isin(set(long["shape_key"].iloc[:half])).mean() < 0.5


@pytest.mark.parametrize(
    ("bad", "key"),
    [
        ({"lengths": "zipf"}, "trace.synthetic.lengths"),
        ({"prompt_median": 0}, "trace.synthetic.prompt_median"),
        ({"generated_sigma": -1.0}, "trace.synthetic.generated_sigma"),
        ({"prompt_sigma": True}, "trace.synthetic.prompt_sigma"),
    ],
)
def test_bad_lognormal_settings_are_named(bad, key):
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        trace.settings({"synthetic": bad})
