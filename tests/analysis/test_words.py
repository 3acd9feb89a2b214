"""The decision's words (headroom.decide.words): the built-in family's are attention's recorded text;
another family's name its own category and features, never attention's."""

from __future__ import annotations

from headroom.core.names import CATEGORY_SPLIT, CATEGORY_SPLIT_GAIN
from headroom.decide import registry, words
from headroom.families.attention.keying import ATTENTION
from tests import family_sets as F


def test_the_built_in_familys_words_are_attentions_recorded_text():
    said = words.of(ATTENTION)
    assert said is words.of() and words.label(CATEGORY_SPLIT_GAIN) == said.label(CATEGORY_SPLIT_GAIN)
    assert said.label(CATEGORY_SPLIT_GAIN) == "one kernel per phase: its net gain over one global kernel"
    assert (
        said.label("richer_gain_exact-key") == "a table per exact shape (batch, q_len, kv_len): its net gain"
    )
    assert said.reason(CATEGORY_SPLIT).startswith("the headroom over one global kernel is a phase split")
    assert registry.needs("exact-key", "graph") == (
        "a runtime dispatch inside the captured graph (kv_len is not fixed at capture)"
    )


def test_a_familys_words_name_its_category_and_features():
    said = words.of(F.KEYING)
    assert said.label(CATEGORY_SPLIT_GAIN) == (
        "one candidate per dtype value: its net gain over one global candidate"
    )
    assert (
        said.label("richer_gain_bucketed")
        == "a table per power-of-two bucket of tokens, hidden: its net gain"
    )
    declared = words.of_family(F.KEYING, order=F.RECORD["feature_order"])
    assert (
        declared.label("richer_gain_exact-key")
        == "a table per exact shape (tokens, hidden, dtype): its net gain"
    )
    assert said.reason(CATEGORY_SPLIT).startswith(
        "the headroom over one global candidate is a category split"
    )
    assert said.label("gap_to_oracle") == words.label("gap_to_oracle")  # what no family changes is shared
    text = " ".join([*said.labels.values(), said.split, said.runtime_dispatch, said.captured])
    assert not any(w in text for w in ("phase", "kv_len", "q_len", "batch"))


def test_a_family_studys_decision_says_its_own_words():
    _, d, _, _ = F.recommend(effect=0.0)
    said = " ".join([*d["reason"].astype(str).unique(), *d["detail"].astype(str).unique()])
    assert "one candidate per dtype value" in said
    assert "per phase" not in said and "kv_len" not in said
