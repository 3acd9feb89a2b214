"""Hand-made artifacts for tests of the readers (catalog, CLI): a frame written through the one write
path, the contract's other required columns filled with placeholder values."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from headroom.core import artifacts, contracts

_FILL = {"string": "x", "integer": 0, "floating point": 0.0, "boolean": False}


def write_filled(path: Path, df: pd.DataFrame, kind: str, inputs: dict[str, str] | None, **provenance) -> str:
    """Write `df` as an artifact of `kind` (its contract's other required columns filled in), with
    provenance rule=kind, empty params, `inputs`, and the given other provenance keys."""
    contract = contracts.contract(kind)
    for name, type_ in contract.columns:
        if name in contract.required and name not in df.columns:
            df[name] = _FILL[contracts._family_name(type_)]
    prov = {"rule": kind, "params": {}, "inputs": inputs or {}, **provenance}
    return artifacts.write(df, path, kind=kind, provenance=prov)
