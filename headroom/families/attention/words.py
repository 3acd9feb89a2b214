"""Attention's words in the decision and the report (``headroom.decide.words.Words``): its category
is the phase, one kernel for prefill and one for decode is the pair a phase split ships, and under
CUDA Graphs kv_len changes inside a replay while the padded batch is fixed at capture. Every recorded
attention study's decision reads them verbatim."""

from __future__ import annotations

from headroom.core.names import CATEGORY_SPLIT_GAIN, GAIN_VS_CATEGORY
from headroom.decide.words import Words

WORDS = Words(
    labels={
        "policy_gain": "the best deployable policy's net gain over the better of one kernel and one kernel "
        "per phase",
        CATEGORY_SPLIT_GAIN: "one kernel per phase: its net gain over one global kernel",
        GAIN_VS_CATEGORY: "the selected policy's net gain over one kernel per phase",
        "policy_gain_runtime_dispatch": "policies keyed on kv_len (under CUDA Graphs they need a runtime "
        "dispatch inside the graph): their net gain",
        "richer_gain_exact-key": "a table per exact shape (batch, q_len, kv_len): its net gain",
    },
    split="the headroom over one global kernel is a phase split: one kernel per phase captures it "
    "(ship the pair), and no policy beyond it gains more than its threshold",
    runtime_dispatch="a runtime dispatch inside the captured graph (kv_len is not fixed at capture)",
    captured="one graph per padded batch size, captured with its kernel",
)
