"""Issue 32, item 4: the modules every family shares name no attention concept. Attention's words
(its phase, q_len, kv_len, RoPE, tiles and heads) live in its own family, headroom.families.attention;
headroom.measure, headroom.policies and headroom.decide work from a family's candidates and declared
features only. A word counts where it starts an identifier or a word (underscores and punctuation
separate words), so `percentile` and `get_device_properties` do not count and `rope_base` does."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHARED = ("headroom/measure", "headroom/policies", "headroom/decide")
ATTENTION_WORDS = re.compile(r"(?<![A-Za-z0-9])(phase|q_len|kv_len|rope|tile|heads_)")


def _modules():
    return sorted(p for folder in SHARED for p in (ROOT / folder).rglob("*.py"))


def test_the_shared_folders_hold_modules():
    assert len(_modules()) >= 20  # the test would pass vacuously on a moved tree


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_a_shared_module_names_no_attention_concept(path):
    hits = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()[:100]}"
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if ATTENTION_WORDS.search(line)
    ]
    assert not hits, "attention words in a module every family shares:\n" + "\n".join(hits)


def test_the_pattern_finds_what_it_should():
    for text in ("phase", "kv_len", "x.q_len", "rope_base", "tiles", "heads_q", "made_of_tile_within"):
        assert ATTENTION_WORDS.search(text), text
    for text in ("percentile", "get_device_properties", "biphase", "fertile"):
        assert not ATTENTION_WORDS.search(text), text
