"""Every committed H200 reference decided under today's rule beside the rule of an earlier tag: the old
-> new verdict table a rule change owes.

    PYTHONPATH=$PWD python tools/validation/replay_references.py --old decision-v3.3 \
        > data/validation/decision-v3.3-vs-v4.md

Today's decision is the decision stage's own calls (``figures.study_figures``, ``decision.decide``;
config/config.yaml's settings; no power simulation) on each reference's recorded artifacts. The old
one is the tagged commit's decision stage, run from a temporary git worktree of that commit (its
commit from data/validation/rule-tags.tsv, so a clone without tags can run it) on the same artifacts.
Per reference: the headline and each deployment-profile part's verdict, old and new, the new reason
code, and why the verdict moved where it did.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from headroom.core import defaults  # noqa: E402

# Run in the old commit's worktree: its own decision stage on one reference, the rows as JSON.
OLD_STAGE = """
import glob, json, sys
import pandas as pd
sys.path.insert(0, ".")
from headroom.core import defaults
try:
    from headroom.analysis import decision, figures
except ImportError:
    from headroom.decide import decision, figures
d = sys.argv[1]
pol = defaults.section("policies")
runs = sorted(p for p in glob.glob(d + "/portfolio/run-*.parquet") if "samples" not in p)
inputs = (pd.read_parquet(d + "/trace.parquet"), pd.concat([pd.read_parquet(p) for p in runs]),
          pd.read_parquet(d + "/lifecycle.parquet"))
figs = figures.study_figures(*inputs, **pol)
dec = defaults.section("decision")
out = decision.decide(figs, pd.read_parquet(d + "/graph_sweep.parquet"), pd.read_parquet(d + "/environment.parquet"),
                      confidence=pol["confidence"], **{k: v for k, v in dec.items() if k != "deployment"},
                      deployment=dec.get("deployment"))
print(json.dumps(out[["mode", "figure", "mode_verdict", "verdict", "state"]].astype(str).to_dict("records")))
"""


def new_decision(folder: Path) -> pd.DataFrame:
    import glob

    from headroom.decide import decision, figures

    pol = defaults.section("policies")
    tf, seed = pol.pop("train_fraction"), pol.pop("seed")
    dec = defaults.section("decision")
    runs = sorted(p for p in glob.glob(f"{folder}/portfolio/run-*.parquet") if "samples" not in p)
    inputs = (
        pd.read_parquet(folder / "trace.parquet"),
        pd.concat([pd.read_parquet(p) for p in runs]),
        pd.read_parquet(folder / "lifecycle.parquet"),
    )
    figs = figures.study_figures(
        *inputs, train_fraction=tf, seed=seed, thresholds=dec, switch_sensitivity=False, **pol
    )
    return decision.decide(
        figs,
        pd.read_parquet(folder / "graph_sweep.parquet"),
        pd.read_parquet(folder / "environment.parquet"),
        confidence=pol["confidence"],
        **{k: v for k, v in dec.items() if k != "deployment"},
    )


def old_decisions(tag: str, folders: list[Path]) -> dict[str, pd.DataFrame]:
    tags = pd.read_csv(ROOT / "data/validation/rule-tags.tsv", sep="\t").set_index("tag")
    commit = tags.loc[tag, "commit"]
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        wt = Path(tmp) / "old"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(wt), commit],
            check=True,
            capture_output=True,
        )
        try:
            for f in folders:
                proc = subprocess.run(
                    [sys.executable, "-c", OLD_STAGE, str(f.resolve())],
                    cwd=wt,
                    capture_output=True,
                    text=True,
                )
                if proc.returncode != 0:
                    raise RuntimeError(f"{tag} on {f.name}: {proc.stderr[-2000:]}")
                out[f.name] = pd.DataFrame(json.loads(proc.stdout.strip().splitlines()[-1]))
        finally:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(wt)], capture_output=True
            )
    return out


def why(old: pd.DataFrame, new: pd.DataFrame) -> str:
    """Why the headline moved (or did not), in the new rule's words."""
    o, n = old["verdict"].iloc[0], new["verdict"].iloc[0]
    code = new["reason_code"].iloc[0]
    left = sorted(
        {
            m
            for m, c in zip(new["mode"], new["mode_reason_code"], strict=True)
            if "@" in m and c in ("host-included", "too-few-invocations")
        }
    )
    said = f"new reason `{code}`" + (f"; left out: {', '.join(left)}" if left else "")
    if o == n:
        return f"unchanged ({said})"
    if o == "continue" and n != "continue":
        return f"continue came from a figure that is no longer decided or from the gap alone ({said})"
    return said


def parts(d: pd.DataFrame) -> str:
    """'graph@decode-only stop, eager@mixed no-decision': each profile part's verdict."""
    units = d.drop_duplicates("mode")[["mode", "mode_verdict"]].itertuples(index=False)
    return ", ".join(f"{m} {v}" for m, v in units if "@" in m)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old", default="decision-v3.3")
    ap.add_argument("folders", nargs="*", type=Path)
    args = ap.parse_args(argv)
    folders = args.folders or sorted(
        p for p in (ROOT / "data/reference/h200").iterdir() if (p / "trace.parquet").is_file()
    )
    old = old_decisions(args.old, folders)
    from headroom.decide import rule

    print(f"# {args.old} -> {rule.RULE_VERSION} on every committed reference\n")
    print("Command: `PYTHONPATH=$PWD python tools/validation/replay_references.py --old " + args.old + "`\n")
    print("| reference | headline old | headline new | parts old | parts new | why |")
    print("| --- | --- | --- | --- | --- | --- |")
    for f in folders:
        new = new_decision(f)
        o = old[f.name]
        print(
            f"| {f.name} | {o['verdict'].iloc[0]} | {new['verdict'].iloc[0]} (`{new['reason_code'].iloc[0]}`) | {parts(o)} | {parts(new)} | {why(o, new)} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
