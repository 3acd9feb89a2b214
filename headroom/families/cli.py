"""`headroom family check SPEC`: a kernel family (docs/families.md) checked against its float64
reference on the shapes a study's trace gives it, before any study measures it. Exit 0 when every
candidate passes on every shape it supports, 1 when one fails or errs, 2 on a family that breaks
its contract or a bad argument."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def add_parser(sub: Any) -> None:
    """The `family` verb of `headroom` (headroom.core.cli)."""
    p = sub.add_parser("family", help="a kernel family (docs/families.md): `family check SPEC`")
    fsub = p.add_subparsers(dest="family_command", required=True)
    c = fsub.add_parser(
        "check",
        help="run every candidate of a family against its reference on the shapes of a study's trace",
    )
    c.add_argument("spec", help="the family, package.module:ATTRIBUTE (importable from the project root)")
    c.add_argument(
        "--trace-of",
        default="default",
        metavar="STUDY",
        help="the study whose trace steps to use (default: default)",
    )
    c.add_argument(
        "--device",
        choices=["auto", "cuda", "interpret"],
        default="auto",
        help="auto: cuda when a GPU is visible, else the Triton interpreter with the study's smoke overlay",
    )
    c.add_argument("--seed", type=int, default=0, help="seed of the input sets (default 0)")
    c.add_argument("--max-shapes", type=int, default=None, help="check only the N most called shapes")
    c.add_argument("--json", action="store_true", help="print the results as JSON rows only")
    c.set_defaults(func=cmd_family_check)


def study_steps(study_name: str, device: str):
    """The steps of a study's trace window, as the pipeline resolves the study on `device`."""
    from headroom.core import config as hconfig
    from headroom.trace import source as htsource
    from headroom.trace import step_table

    config = hconfig.load(PROJECT_ROOT / "config" / "config.yaml")
    studies = hconfig.plan_studies(
        {**config, "device": device, "studies": [study_name]}, check_source=htsource.check
    )
    study = studies[study_name]
    if study.get("replay"):
        raise ValueError(
            f"study {study_name!r} replays a recorded study: name a measured study for --trace-of"
        )
    return study["device"], step_table.build(study["trace"], study["partition"], base_dir=PROJECT_ROOT)


def cmd_family_check(args: argparse.Namespace) -> int:
    from headroom.core import cli
    from headroom.core import config as hconfig
    from headroom.families import check, expand, loading
    from headroom.families.contract import FamilyError

    if args.max_shapes is not None and args.max_shapes < 1:
        raise cli.CliError(f"--max-shapes must be >= 1, got {args.max_shapes}", cli.EXIT_USAGE)
    try:
        device, table = study_steps(args.trace_of, args.device)
        loaded = loading.load(args.spec, device=device, root=PROJECT_ROOT)
        invocations = expand.expand(loaded.family, expand.steps_of(table))
        results = check.check(
            loaded.family, invocations, device=device, seed=args.seed, max_shapes=args.max_shapes
        )
    except (FamilyError, ValueError, hconfig.ConfigError) as exc:
        raise cli.CliError(str(exc), cli.EXIT_USAGE) from None
    bad = results["status"].isin(["failed", "error"])
    if args.json:
        print(
            json.dumps(
                cli.jsonable({"family": loaded.family.name, "rows": results.to_dict("records")}),
                allow_nan=False,
            )
        )
    else:
        print("\n".join(lines(loaded, table, invocations, results, device)))
    return 1 if bad.any() else 0


def lines(loaded: Any, table: Any, invocations: Any, results: Any, device: str) -> list[str]:
    from headroom.families import check

    fam = loaded.family
    kinds = ", ".join(f"{k} {n}" for k, n in invocations["step_kind"].value_counts().sort_index().items())
    out = [
        f"family {fam.name} {fam.version} (source blake3 {loaded.source_blake3[:16]}, {len(loaded.files)} file(s)) on {device}",
        f"  {len(table)} steps -> {len(invocations)} calls ({kinds}), {invocations['shape_key'].nunique()} shapes; "
        f"checked {results['shape_key'].nunique()} shapes x {results['candidate'].nunique()} candidates",
        f"  {'candidate':<40} {'passed':>6} {'failed':>6} {'unsup.':>6} {'error':>6}",
    ]
    for r in check.summary(results).itertuples(index=False):
        out.append(f"  {r.candidate:<40} {r.passed:>6} {r.failed:>6} {r.unsupported:>6} {r.error:>6}")
    for r in results[results["status"].isin(["failed", "error"])].itertuples(index=False):
        out.append(f"  {r.status}: {r.candidate} on {r.shape_key}: {r.reason}")
    return out
