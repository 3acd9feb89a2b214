"""Per GPU job: Snakemake's benchmark seconds minus what the job's own log accounts for (its process
age at the stage's start + the stage's wall): the job's process exit and Snakemake's wrapping.
    python3 exit_gap.py NAME=STUDY_DIR:LOG ...  (from the repository root; LOG: the Snakemake log, .gz or plain)"""

import gzip
import re
import sys
from pathlib import Path

import pandas as pd

from headroom.measure.cost import bench_s

for arg in sys.argv[1:]:
    name, rest = arg.split("=", 1)
    root, log = rest.split(":", 1)
    text = (gzip.open(log, "rt") if log.endswith(".gz") else open(log)).read()
    jobs = []
    for block in text.split("localrule ")[1:]:  # one job each: its wildcards, start and last lines
        run = re.search(r"wildcards: study=\w+, run=(\d+)", block)
        start = re.search(r"headroom\.(\w+) INFO rule \w+ on device cuda, pid \d+, ([\d.]+) s after", block)
        end = re.search(r"INFO rule \w+ finished in ([\d.]+) s wall", block)
        if not (start and end):
            continue
        rule, age, wall = start.group(1), float(start.group(2)), float(end.group(1))
        job = f"portfolio/run-{run.group(1)}" if rule == "portfolio" else rule
        bench = Path(root) / "benchmarks" / f"{job}.tsv"
        if bench.exists():
            s = bench_s(bench)
            jobs.append((job, s, age, wall, s - age - wall))
    df = pd.DataFrame(jobs, columns=["job", "benchmark_s", "start_s", "stage_wall_s", "beyond_s"])
    print(f"== {name}\n{df.round(2).to_string(index=False)}")
