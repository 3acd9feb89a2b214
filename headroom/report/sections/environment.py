"""The machine the measurements were made on, and the stages' wall times."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from headroom.report.model import Section, column_format, header, skipped, table


def section(env: pd.DataFrame | None, why: str) -> Section:
    title = "Environment"
    if env is None or env.empty:
        return skipped("environment", title, why if env is None else "the artifact has no rows")
    row = env.iloc[0]
    kv = pd.DataFrame(  # each value in its column's unit (sizes in binary units), keys as headers
        {
            "key": [header(str(k)) for k in row.index],
            "value": [column_format(str(k), [v])(v) for k, v in row.items()],
        }
    )
    return Section("environment", title, tables=[table("Machine the measurements were made on", kv)])


def benchmarks_section(benchmarks: Mapping[str, pd.DataFrame] | None) -> Section:
    title = "Stage wall times"
    if not benchmarks:
        return skipped(
            "benchmarks", title, "no Snakemake benchmark files were found under results/benchmarks/"
        )
    rows = []
    for name, df in sorted(benchmarks.items()):
        if "s" in df.columns and len(df):
            rows.append(
                {
                    "stage": name,
                    "wall_s": float(df["s"].iloc[0]),
                    "max_rss_mb": float(df["max_rss"].iloc[0])
                    if "max_rss" in df.columns and df["max_rss"].iloc[0] != "-"
                    else np.nan,
                }
            )
    if not rows:
        return skipped("benchmarks", title, "benchmark files have no 's' column")
    return Section("benchmarks", title, tables=[table("Snakemake benchmark: files", pd.DataFrame(rows))])
