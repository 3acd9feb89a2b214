"""policy_eval on the two portfolio runs the moe study recorded before its calls ran out (runs 4
and 6 of partial-study/), with the code that decides (headroom.decide.policy_eval), no lifecycle
charges: a first look at the per-M table, not the study's decision. partial-study/ is retired from
main: restore it first (`python3 tools/restore_reference.py session15-moe-partial`). From the root:
    python3 data/checks/h200/2026-12-04-session15/two_runs.py
"""

from pathlib import Path

import pandas as pd

from headroom.core import artifacts
from headroom.decide import policy_eval
from headroom.policies import Keying

HERE = Path(__file__).parent / "partial-study"
trace = pd.read_parquet(HERE / "trace.parquet")
keying = Keying.of_record(artifacts.read_provenance(HERE / "trace.parquet")["extra"]["family"])
runs = pd.concat([pd.read_parquet(HERE / f"portfolio/run-{r}.parquet") for r in (4, 6)])
pe = policy_eval.evaluate(trace, runs, None, train_fraction=0.5, seed=0, keying=keying,
                          bootstrap_resamples=1000, random_draws=10)  # fmt: skip
shown = ["global", "config-table", "exact-key", "bucketed", "batch-keyed", "oracle"]
cols = ["mode", "run", "policy", "test_us", "gain_vs_global_pct", "ci_low", "ci_high", "gap_to_oracle_pct",
        "global_candidate"]  # fmt: skip
rows = pe[pe["policy"].isin(shown)].drop_duplicates(["mode", "run", "policy"])[cols]
pd.set_option("display.width", 200)
print(rows.round(2).to_string(index=False))
