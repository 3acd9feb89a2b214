"""The oracle chosen per run resample (headroom.decide.engine): computed a seed and a few hundred
resamples at a time, and scored once per run, it gives what the whole-array definition gives, bit
for bit (issue 36: the decision stage in seconds, the same numbers as decision v4)."""

from __future__ import annotations

import numpy as np
import pytest

from headroom.decide import engine


@pytest.fixture()
def surface():
    rng = np.random.default_rng(7)
    S, R, n, C, B = 3, 6, 11, 9, 37
    ut = np.exp(rng.normal(size=(S, R, n, C)))
    ut[:, :, :, 4] = ut[:, :, :, 2]  # an exact tie: the first of the two, as argmin picks it
    free = np.array([0, 2, 3, 4, 6, 8])
    counts = rng.multinomial(R, [1 / R] * R, size=B)
    return ut, free, counts


def test_resampled_oracle_in_chunks_is_the_whole_array_argmin(surface, monkeypatch):
    ut, free, counts = surface
    whole = free[np.argmin(np.einsum("br,srnc->sbnc", counts, ut[..., free]), axis=-1)]
    monkeypatch.setattr(engine, "_CHUNK_VALUES", 5 * ut.shape[2] * len(free))  # 5 resamples a chunk
    chunked = engine._oracle_all(ut, free, counts)
    assert chunked.shape == whole.shape == (ut.shape[0], counts.shape[0], ut.shape[2])
    assert np.array_equal(chunked, whole)
    assert not np.isin(4, chunked)  # the tie went to column 2
    monkeypatch.setattr(engine, "_CHUNK_VALUES", 1)  # one resample a chunk: still the same
    assert np.array_equal(engine._oracle_all(ut, free, counts), whole)


def test_per_resample_sums_of_the_oracle_are_each_pairs_own(surface):
    ut, free, counts = surface
    S, R, n, _ = ut.shape
    A, B = np.array([0, 0, 1, 2, 3, 5]), np.array([1, 2, 2, 2, 4, 1])  # pairs sharing a scoring run b
    boot = np.random.default_rng(1).multinomial(n, [1 / n] * n, size=counts.shape[0]).astype(float)
    _, per_boot = engine._oracle_all_sums(ut, free, A, B, counts, boot)
    chosen = engine._oracle_all(ut, free, counts)
    for w in (np.ones((1, n)), np.random.default_rng(2).random((S, n))):  # a mask's weights, twice
        out = per_boot(w)
        for p, b in enumerate(B):
            val = np.take_along_axis(ut[:, b][:, None], chosen[..., None], -1)[..., 0]
            assert np.array_equal(out[:, p], np.einsum("sbn,sn,bn->sb", val, w, boot))
