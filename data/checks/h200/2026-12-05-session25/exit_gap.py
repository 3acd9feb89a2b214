"""Per GPU job: Snakemake's benchmark seconds minus what the job's own log accounts for (its process
age at the stage's start + the stage's wall): the job's process exit and Snakemake's wrapping.
    python3 exit_gap.py NAME=STUDY_DIR:LOG ...  (LOG: the Snakemake log, .gz or plain)"""

import gzip
import re
import sys
from pathlib import Path

import pandas as pd

for arg in sys.argv[1:]:
    name, rest = arg.split("=", 1)
    root, log = rest.split(":", 1)
    text = (gzip.open(log, "rt") if log.endswith(".gz") else open(log)).read()
    jobs = []
    for m in re.finditer(
        r"wildcards: study=\w+(?:, run=(\d+))?.*?headroom\.(\w+) INFO rule \w+ on device cuda, pid \d+, ([\d.]+) s after.*?headroom\.\2 INFO rule \w+ finished in ([\d.]+) s wall",
        text,
        re.S,
    ):
        run, rule, age, wall = m.groups()
        job = f"portfolio/run-{run}" if rule == "portfolio" else rule
        bench = Path(root) / "benchmarks" / f"{job}.tsv"
        if bench.exists():
            s = float(pd.read_csv(bench, sep="\t")["s"].iloc[0])
            jobs.append((job, s, float(age), float(wall), s - float(age) - float(wall)))
    df = pd.DataFrame(jobs, columns=["job", "benchmark_s", "start_s", "stage_wall_s", "beyond_s"])
    print(f"== {name}\n{df.round(2).to_string(index=False)}")
