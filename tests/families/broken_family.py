"""Families that break the contract where a study's trace and candidates stages call them, for the
stage tests (tests/families/test_study.py): loaded by spec, as a study's `family:` names them."""

from __future__ import annotations

from tests.families.softmax_family import RowSoftmax


class ShapesRaise(RowSoftmax):
    def shapes(self, step):
        raise KeyError("decode_kv_lens")


class CandidatesRepeat(RowSoftmax):
    def candidates(self):
        return super().candidates() * 2


RAISES = ShapesRaise()
REPEATS = CandidatesRepeat()
