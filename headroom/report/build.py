"""The report: the answer first (the verdict in two sentences, what to ship, what the study could
detect), then what the headroom is made of, our kernels against the native backends, and every
table and figure a reviewer needs.

``build(inputs, read, out_dir, title=...)`` writes ``index.html`` (self-contained: figures embedded
as base64 PNG), ``report.md`` (figures linked from ``figures/``) and ``figures/*.png``. Every number
is read from an artifact (or computed from artifact numbers in front of the reader: ranges, ratios,
break-even horizons). An input that is missing, or whose rows are all ``status = 'skipped'``, renders
as "skipped: <reason>" in its section, never as a crash or a made-up number. Each section is one
module of ``headroom.report.sections``; ``headroom.report.model`` holds what they are made of, and
every number is written by ``headroom.core.format``. What to ship comes from ``headroom.report.ship``
(recommendation.parquet, else the decision's kernel rows, else policy_eval's global candidate).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd
from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

from headroom.core import defaults, parallel
from headroom.decide import decision as hdecision
from headroom.report import ship
from headroom.report.family import FamilyView, not_applicable
from headroom.report.model import Section, fmt  # noqa: F401  (fmt: re-exported for callers)
from headroom.report.sections import (
    answer,
    correctness,
    environment,
    fusion,
    headroom_made_of,
    lifecycle,
    natives,
    noise,
    policies,
    roofline,
    surface,
    verdict,
)

TEMPLATES = Path(__file__).parent / "templates"

INPUTS = (
    "decision",
    "environment",
    "trace",
    "candidates",
    "correctness",
    "portfolio",
    "samples",
    "lifecycle",
    "graph_sweep",
    "calibration",
    "policy_eval",
    "factorial",
    "roofline",
    "recommendation",
)
STYLE = TEMPLATES / "style.css"  # the study report's and the cross-study page's one style sheet
NOT_GPU = "These timings are not GPU measurements (device: {device}), so the decision is no-decision."
FAMILY_TITLE = "headroom: is a shape-adaptive {name} portfolio worth building?"  # the default title's


def build(
    inputs: Mapping[str, pd.DataFrame | None],
    read: Sequence[tuple[str, str]],
    out_dir: str | Path,
    *,
    title: str = "headroom report",
    benchmarks: Mapping[str, pd.DataFrame] | None = None,
    missing: Mapping[str, str] | None = None,
    family: Mapping | None = None,
) -> dict[str, Path]:
    """Write index.html, report.md and figures/*.png under out_dir; return their paths.

    inputs: artifact name (see ``INPUTS``) -> DataFrame, or None/absent when not available;
    read: (path, blake3) of every artifact read, listed in the report; benchmarks: stage name ->
    Snakemake benchmark table; missing: artifact name -> why it is absent (shown as "skipped: ...");
    family: what the trace records of a kernel family (provenance ``extra.family``; without it, the
    trace's ``family`` column names one): its sections read in its feature names, and those that are
    attention's only say in one line that they do not apply.
    """
    unknown = sorted(set(inputs) - set(INPUTS))
    if unknown:
        raise ValueError(f"inputs: unknown artifact name(s) {unknown}; known: {list(INPUTS)}")
    missing = dict(missing or {})

    def why(name):
        return missing.get(name, f"{name} artifact not provided")

    fam = FamilyView.of(family, inputs.get("trace"))
    if fam is not None and title == defaults.value("report", "title"):  # attention's words: the family's
        title = FAMILY_TITLE.format(name=fam.name)
    context = _headline(inputs.get("decision"), inputs.get("environment"), why("decision"))
    sections = (
        _sections(inputs, benchmarks, why) if fam is None else _family_sections(inputs, benchmarks, why, fam)
    )
    context.update(
        title=title,
        css=STYLE.read_text(encoding="utf-8"),
        sections=sections,
        artifacts=[{"path": str(p), "blake3": str(h)} for p, h in sorted(read)],
    )
    out = Path(out_dir)
    paths = _write_figures(sections, out)
    paths.update(_render(context, out))
    return paths


def _headline(d: pd.DataFrame | None, env: pd.DataFrame | None, why: str) -> dict:
    """verdict, reason, device and the not-a-GPU banner, from decision.parquet (or why it is absent)."""
    device = hdecision.device_of(env)
    if d is not None and "device" in d.columns:
        device = str(d["device"].iloc[0])
    return {
        "verdict": str(d["verdict"].iloc[0]) if d is not None else "no-decision",
        "reason": str(d["reason"].iloc[0]) if d is not None else f"skipped: {why}",
        "device": device,
        "banner": NOT_GPU.format(device=device) if device != "cuda" else "",
    }


def _sections(inputs: Mapping, benchmarks, why) -> list[Section]:
    """Every section in reading order: the answer first (verdict, what to ship, power), then what it
    is made of, how our kernels compare, and what it all stands on. Each is drawn apart from the
    others (:func:`_drawn`)."""
    get = inputs.get
    ships = ship.what_to_ship(get("recommendation"), get("decision"), get("policy_eval"))
    return _drawn(
        (answer.section, get("decision"), ships, why("decision")),
        (headroom_made_of.section, get("decision"), why("decision")),
        (natives.section, get("portfolio"), get("trace"), ships, why("portfolio")),
        (natives.latency_section, get("portfolio"), get("trace"), why("portfolio")),
        (roofline.section, get("roofline"), why("roofline"), get("calibration")),
        (verdict.section, get("decision"), why("decision")),
        (surface.section, get("portfolio"), why("portfolio")),
        (policies.section, get("policy_eval"), why("policy_eval")),
        (policies.factorial_section, get("factorial"), why("factorial")),
        (fusion.section, get("graph_sweep"), why("graph_sweep")),
        (lifecycle.section, get("lifecycle"), get("policy_eval"), why("lifecycle")),
        (noise.section, get("portfolio"), get("samples"), why("portfolio")),
        (correctness.section, get("correctness"), why("correctness")),
        (environment.section, get("environment"), why("environment")),
        (environment.benchmarks_section, benchmarks),
    )


def _family_sections(inputs: Mapping, benchmarks, why, fam: FamilyView) -> list[Section]:
    """A kernel family's sections, in the same order: attention's only (natives, the latency against
    kv_len and batch, the factorial, fusion) say in one line that they do not apply."""
    get = inputs.get
    ships = ship.what_to_ship(get("recommendation"), get("decision"), get("policy_eval"))
    return _drawn(
        (answer.section, get("decision"), ships, why("decision"), fam),
        (headroom_made_of.section, get("decision"), why("decision"), fam),
        (
            not_applicable,
            "natives",
            natives.TITLE,
            fam,
            "its candidates are its own; no native attention backend is timed beside them",
        ),
        (
            not_applicable,
            "latency",
            natives.LATENCY_TITLE,
            fam,
            "kv_len, batch and phase are attention's features",
        ),
        (roofline.section, get("roofline"), why("roofline"), get("calibration"), fam),
        (verdict.section, get("decision"), why("decision"), fam),
        (surface.section, get("portfolio"), why("portfolio"), fam),
        (policies.section, get("policy_eval"), why("policy_eval"), fam),
        (
            not_applicable,
            "factorial",
            policies.FACTORIAL_TITLE,
            fam,
            "its fusion arms are attention's (RoPE in the kernel)",
        ),
        (
            not_applicable,
            "fusion",
            fusion.TITLE,
            fam,
            "the graph sweep measures attention's RoPE fusion per working-set regime",
        ),
        (lifecycle.section, get("lifecycle"), get("policy_eval"), why("lifecycle"), fam),
        (noise.section, get("portfolio"), get("samples"), why("portfolio")),
        (correctness.section, get("correctness"), why("correctness"), fam),
        (environment.section, get("environment"), why("environment")),
        (environment.benchmarks_section, benchmarks),
    )


def _drawn(*calls: tuple) -> list[Section]:
    """Each ``(section function, *args)`` called, in order, side by side in forked processes on the
    cores this process may use (:func:`headroom.core.parallel.forked_map`): a section reads the
    study's tables and draws its own figures, and shares nothing with the others, so the report
    is the one a single process draws, in less time (the surface section's heatmaps, the largest,
    draw beside the rest)."""
    return parallel.forked_map([(fn, tuple(args)) for fn, *args in calls])


def _write_figures(sections: list[Section], out: Path) -> dict[str, Path]:
    (out / "figures").mkdir(parents=True, exist_ok=True)
    for old in (out / "figures").glob("*.png"):
        old.unlink()
    paths = {}
    for section in sections:
        for fig in section.figures:
            path = out / "figures" / f"{fig.name}.png"
            path.write_bytes(fig.png)
            paths[f"figures/{fig.name}.png"] = path
    return paths


def _render(context: dict, out: Path) -> dict[str, Path]:
    """index.html and report.md from the templates, each written atomically."""
    common = dict(loader=FileSystemLoader(TEMPLATES), undefined=StrictUndefined, keep_trailing_newline=True)
    html_env = Environment(autoescape=select_autoescape(["html", "j2"]), **common)
    md_env = Environment(autoescape=False, trim_blocks=True, lstrip_blocks=True, **common)
    md_env.filters["cell"] = lambda v: str(v).replace("|", "\\|").replace("\n", " ")
    paths = {}
    for name, env, template in (
        ("index.html", html_env, "report.html.j2"),
        ("report.md", md_env, "report.md.j2"),
    ):
        path = out / name
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(env.get_template(template).render(**context), encoding="utf-8")
        tmp.replace(path)
        paths[name] = path
    return paths
