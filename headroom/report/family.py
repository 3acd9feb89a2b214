"""What the report says of a kernel family's study (docs/families.md): which family it is, what its
policies key on in the family's own feature names, and the one line an attention-only section (fusion,
the graph sweep, natives, the decoder-layer share, RoPE) gives in place of its tables.

``FamilyView.of(record, trace)`` is None for the built-in attention family (no record, or one naming
attention, and a trace without a family column): every section then reads as it always has.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pandas as pd

from headroom.core.contracts import ATTENTION, family_of
from headroom.decide import words as decision_words
from headroom.policies.shapes import Keying

#: The status of a section that does not apply to the study's family (the templates name it so).
NOT_APPLICABLE = "not-applicable"
#: At most this many capture sizes are written out (then an ellipsis and the largest).
SHOWN_SIZES = 4


@dataclass(frozen=True)
class FamilyView:
    """A kernel family as its study's artifacts record it (provenance ``family``)."""

    name: str
    version: str = ""
    spec: str = ""
    source_blake3: str = ""
    features: dict = field(default_factory=dict)  # name -> its declaration, in declared order
    captured_by: str = ""  # the feature whose capture limit decides graph or eager ('': none)

    @classmethod
    def of(cls, record: Mapping | None, trace: pd.DataFrame | None = None) -> FamilyView | None:
        """The family of a study from its trace's provenance record (``extra.family``), else from the
        trace's ``family`` column (name only); None for attention."""
        if record and record.get("name", ATTENTION) != ATTENTION:
            order = list(record.get("feature_order") or record.get("features") or ())
            feats = record.get("features") or {}
            return cls(
                name=str(record["name"]),
                version=str(record.get("version", "")),
                spec=str(record.get("spec", "")),
                source_blake3=str(record.get("source_blake3", "")),
                features={n: dict(feats[n]) for n in order if n in feats},
                captured_by=str(record.get("captured_by") or ""),
            )
        name = family_of(trace) if trace is not None else ATTENTION
        return None if name in (None, ATTENTION) else cls(name=str(name))

    # -- what it declares ---------------------------------------------------------------------
    @property
    def keying(self) -> Keying | None:
        if not self.features:
            return None
        captured = {"captured_by": self.captured_by} if self.captured_by else {}
        return Keying.of_record(
            {"name": self.name, "features": self.features, "feature_order": list(self.features), **captured}
        )

    def _names(self, names) -> str:
        names = list(names)
        return ", ".join(names) if names else "none"

    @property
    def words(self) -> decision_words.Words:
        """What the decision's figures and reasons say in the family's feature names."""
        return decision_words.of_family(self.keying or Keying(), order=list(self.features))

    def categories(self) -> str | None:
        """'dtype value' (one category feature), 'combination of a, b', or None (none declared)."""
        return None if self.keying is None else decision_words.category_phrase(self.keying)

    def captured(self) -> str:
        """The capture-fixed keys in words: 'dtype, tokens padded to its capture sizes (1, 2, 4, ...,
        512), hidden'."""
        k = self.keying
        if k is None:
            return "its capture-fixed features"
        parts = list(k.categories)
        for f, _, sizes in k.capture:
            if sizes:
                shown = [str(s) for s in sizes]
                if len(shown) > SHOWN_SIZES:
                    shown = [*shown[: SHOWN_SIZES - 1], "…", shown[-1]]
                parts.append(f"{f} padded to its capture sizes ({', '.join(shown)})")
            else:
                parts.append(f)
        return ", ".join(parts) if parts else "none (it declares no capture-fixed feature)"

    # -- the words ----------------------------------------------------------------------------
    def headline(self) -> str:
        """Which family the study measured, and what its policies key on."""
        said = f"Kernel family {self.name}"
        if self.version:
            said += f" {self.version}"
        where = [
            w
            for w in (self.spec, f"source BLAKE3 {self.source_blake3[:16]}" if self.source_blake3 else "")
            if w
        ]
        if where:
            said += f" ({'; '.join(where)})"
        if not self.features:
            return said + ": its candidates are its own; the policies key on its declared features."
        said = (
            f"{said}: its candidates are its own; the policies key on its declared features "
            f"({self._names(self.features)}), and under CUDA graphs only on the capture-fixed ones "
            f"({self.captured()})"
        )
        k = self.keying
        if k is not None and k.captured_by is not None:  # the deployment profile splits by capture
            said += (
                f". Deployed, its calls with {k.captured_by} <= {k.capture_limit} replay CUDA graphs "
                f"and larger ones run eager, whatever the step: the deployment profile's parts are "
                f"graph@captured and eager@uncaptured"
            )
        return said + "."

    def policy(self, name: str) -> str:
        """What policy ``name`` keys on, in the family's feature names."""
        k = self.keying
        cats = self.categories()
        if k is None:
            return f"keyed on family {self.name}'s declared features"
        numeric = self._names(f for f, _ in k.numeric)
        per = f", per {cats}" if cats else ""
        return {
            "global": "one candidate for every shape",
            "phase-keyed": f"one candidate per {cats}"
            if cats
            else f"one candidate (family {self.name} declares no category feature)",
            "batch-keyed": f"keyed on family {self.name}'s capture-fixed features: {self.captured()}",
            "exact-key": f"one candidate per exact shape ({self._names(self.features)})",
            "regret-aware": "one candidate per exact shape where the gain's lower bound beats the cost of deviating",
            "bucketed": f"one candidate per power-of-two bucket of {numeric}{per}",
            "clustered": f"k-means clusters on log2 of {self._names(k.cluster)}",
            "random": "a random candidate per call",
            "config-table": "the given per-M config table, nearest-M lookup (as servers run it), not fitted on the trace",
        }.get(name, f"keyed on family {self.name}'s declared features")

    def label(self, figure: str) -> str:
        """A decision figure's words in the family's feature names (``words``)."""
        return self.words.label(figure)

    def not_applicable(self, what: str, topic: str = "") -> str:
        """The one line of an attention-only section: 'Does not apply to family rmsnorm: <what>.', or
        with a topic '<topic>: does not apply to family rmsnorm: <what>.'"""
        said = f"does not apply to family {self.name}: {what}."
        return f"{topic}: {said}" if topic else said[0].upper() + said[1:]


def not_applicable(key: str, title: str, fam: FamilyView, what: str):
    """A section that does not apply to the study's family: its one line."""
    from headroom.report.model import Section

    return Section(key, title, status=NOT_APPLICABLE, text=[fam.not_applicable(what)])
