"""One-off H200 pilot (session 14): a portfolio run (run 7) or the lifecycle's switch section on the
study's own trace, candidates and correctness, outside Snakemake; writes parquet to OUT."""

import logging
import sys
import time
from pathlib import Path

import pandas as pd

what, out, device = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
small = len(sys.argv) > 4
r = Path(__file__).parent / "r"
logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(asctime)s %(name)s %(message)s")
log = logging.getLogger("pilot")
from headroom.core import defaults  # noqa: E402
from headroom.measure.correctness import admitted  # noqa: E402

trace = pd.read_parquet(r / "trace.parquet")
cands = admitted(pd.read_parquet(r / "candidates.parquet"), pd.read_parquet(r / "correctness.parquet"))
if small:
    trace = trace[trace["q_len"] == 1].head(1)
    cands = cands[cands["candidate"].str.startswith("t0")].head(1)
rope = defaults.value("partition", "rope_base")
t0 = time.perf_counter()
if what == "portfolio":
    from headroom.families.attention import portfolio

    sec = {k: v for k, v in defaults.section("portfolio").items() if k != "runs"}
    rows, samples = portfolio.run(
        trace, cands, sec, run=7, device=device, rope_base=rope, log=log, progress=False
    )
    rows.to_parquet(out / "pilot_run-7.parquet")
else:
    from headroom.families.attention import lifecycle
    from headroom.measure import timing

    cfg = lifecycle.settings(defaults.section("lifecycle"))
    if small:
        cfg["switch_reps"], cfg["warmup_reps"] = 4, 2
    rows = lifecycle.switch_rows(
        trace,
        cands
        if not small
        else admitted(
            pd.read_parquet(r / "candidates.parquet"), pd.read_parquet(r / "correctness.parquet")
        ).head(6),
        cfg,
        device,
        rope,
        timing.l2_bytes(),
        log,
    )
    pd.DataFrame(rows).to_parquet(out / "pilot_switch.parquet")
log.info("%s: %.1f s", what, time.perf_counter() - t0)
