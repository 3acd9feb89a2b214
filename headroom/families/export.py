"""`headroom export STUDY_DIR --format triton-configs|python [--out FILE]`: a kernel family's dispatch
table in the form its users load (docs/families.md, "Exporting the table").

For a family made with ``headroom.families.from_triton_autotune`` each candidate is one of the
autotuner's configs (its params are ``triton.Config.all_kwargs()``: the kwargs, then num_warps,
num_stages, num_ctas and maxnreg where set). Per scope of the study's dispatch.json (each mode and
each part of the deployment profile), the export lists the config chosen per key, each key written as
the range of feature values it holds:

* ``batch-keyed`` (the capture-keyed policy): each category value, and each capture-fixed int
  feature as the range its padded value stands for (tokens padded to 4: 3..4; above the largest
  capture size a value is its own key: 600..600; without capture sizes, exact);
* ``bucketed``: each category value and each int feature's power-of-two bucket (8: 5..8);
* ``phase-keyed``: each category value; ``exact-key`` and ``regret-aware``: each exact shape (its
  key's values); ``global``: nothing but the default;

and the default (the policy's fallback: every key it did not see). ``clustered`` keys on k-means
clusters (no range of a feature holds a cluster) and ``random`` on nothing: refused, as is a table
of attention's or of a family whose candidates are not Triton configs. A range is inclusive; None
(JSON null) is unbounded, the feature's declared ``min``/``max`` where it has them.

``--format triton-configs`` writes JSON; ``--format python`` a Python file defining
``CONFIGS = {scope: [(key_range, triton.Config(...)), ...]}`` (the default last, its key_range
None), ``PROFILE`` (step kind -> scope) and ``config_for(scope, **features)``.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

#: What ``--format`` takes
FORMATS = ("triton-configs", "python")
#: A triton.Config's own fields among its ``all_kwargs()`` (the rest are the kernel's kwargs)
CONFIG_FIELDS = ("num_warps", "num_stages", "num_ctas", "maxnreg", "ir_override")
#: The policies whose keys are ranges (or exact values) of the family's features
RANGED = ("global", "phase-keyed", "batch-keyed", "bucketed", "exact-key", "regret-aware")
EXPORT_VERSION = 1


class ExportError(ValueError):
    """A table export cannot write (not a family's, not Triton configs, not keyed on ranges)."""


def add_parser(sub: Any) -> None:
    """The `export` verb of `headroom` (headroom.core.cli)."""
    p = sub.add_parser(
        "export",
        help="a kernel family's dispatch table as its users load it: the Triton config per key range "
        "(JSON, or a Python file of triton.Config)",
    )
    p.add_argument(
        "study_dir", metavar="STUDY_DIR", help="the study folder (results/<study>) holding dispatch.json"
    )
    p.add_argument(
        "--format",
        choices=FORMATS,
        default="triton-configs",
        help="triton-configs: JSON (default); python: a Python file defining CONFIGS of triton.Config",
    )
    p.add_argument("--out", metavar="FILE", default=None, help="write it here (default: stdout)")
    p.set_defaults(func=cmd_export)


# ----------------------------------------------------------------------------------------------
# Candidates as Triton configs
# ----------------------------------------------------------------------------------------------


def triton_config(cid: str, params: dict) -> dict | None:
    """{'kwargs', 'num_warps', 'num_stages', ...} of a candidate whose params are a Triton config's
    ``all_kwargs()`` and whose id names its warps and stages as ``config_id`` does (an autotune
    family's), else None."""
    warps, stages = params.get("num_warps"), params.get("num_stages")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (warps, stages)):
        return None
    if not {f"w{warps}", f"s{stages}"} <= set(cid.split("-")):
        return None
    out = {"kwargs": {k: v for k, v in params.items() if k not in CONFIG_FIELDS}}
    out.update({k: params[k] for k in CONFIG_FIELDS if params.get(k) is not None})
    return out


def configs_of(table: dict) -> dict[str, dict]:
    """{candidate id: its Triton config} of a family's table; ExportError naming what is not one."""
    family = table.get("family")
    if family is None:
        raise ExportError(
            f"study {table['study']!r}: an attention table, not a kernel family's: export writes a family's "
            "Triton configs (docs/families.md)"
        )
    out = {}
    for cid, facts in table["candidates"].items():
        config = triton_config(cid, facts.get("params") or {})
        if config is None:
            raise ExportError(
                f"family {family['name']!r}: candidate {cid!r} is not a Triton config (its params "
                f"{json.dumps(facts.get('params'), sort_keys=True)[:120]}): export is for families made with "
                "headroom.families.from_triton_autotune"
            )
        out[cid] = config
    return out


# ----------------------------------------------------------------------------------------------
# Keys as ranges of the features
# ----------------------------------------------------------------------------------------------


def _bounds(spec: dict) -> tuple[Any, Any]:
    return spec.get("min"), spec.get("max")


def padded_range(value: int, sizes: tuple[int, ...], spec: dict) -> list:
    """[low, high] of the values a capture-fixed feature pads to ``value`` (``shapes.padded``)."""
    low, _ = _bounds(spec)
    if not sizes or value not in sizes:  # above the largest capture size: the value is its own key
        return [value, value]
    i = sizes.index(value)
    return [sizes[i - 1] + 1 if i else low, value]


def bucket_range(value: int, spec: dict) -> list:
    """[low, high] of the int values whose power-of-two ceiling is ``value`` (``shapes.pow2``)."""
    low, _ = _bounds(spec)
    return [low, 1] if value <= 1 else [value // 2 + 1, value]


def _typed(spec: dict | None, text: str, name: str) -> Any:
    """A key's value as the feature's kind reads it (a category: the text)."""
    kind = (spec or {}).get("kind")
    if kind == "category":
        return text
    try:
        value = json.loads(text)
    except ValueError:
        if spec is None:  # a shape entry besides the features: a bare string
            return text
        raise ExportError(f"key value {name}={text!r:.40} is not a {kind}") from None
    if kind == "int" and not (isinstance(value, int) and not isinstance(value, bool)):
        raise ExportError(f"key value {name}={text!r:.40} is not an int")
    return value


def _labelled(part: str, label: str, name: str) -> int:
    if not part.startswith(label):
        raise ExportError(f"key part {part!r:.40} does not name {name}")
    try:
        return int(part[len(label) :])
    except ValueError:
        raise ExportError(f"key part {part!r:.40}: {name} is not an int") from None


def key_range(policy: Any, key: Any, features: dict) -> dict:
    """{feature: its value (a category, an exact shape) or its [low, high] range} of one table key."""
    k = policy.keying
    name = policy.name
    if name == "global":
        return {}
    if name == "phase-keyed":
        return dict(zip(k.categories, str(key).split("|"), strict=True)) if k.categories else {}
    if name in ("exact-key", "regret-aware"):
        out = {}
        for part in str(key).split("|"):
            if "=" not in part:
                raise ExportError(f"shape key {key!r:.60}: part {part!r:.40} is not name=value")
            f, text = part.split("=", 1)
            out[f] = _typed(features.get(f), text, f)
        return out
    parts = str(key).split("|")
    cats = dict(zip(k.categories, parts[: len(k.categories)], strict=False))
    rest = parts[len(k.categories) :]
    if name == "batch-keyed":
        if len(rest) != len(k.capture):
            raise ExportError(f"batch-keyed key {key!r:.60}: not {len(k.capture)} capture-fixed part(s)")
        ranges = {
            f: padded_range(_labelled(part, label, f), sizes, features.get(f, {}))
            for part, (f, label, sizes) in zip(rest, k.capture, strict=True)
        }
        return {**cats, **ranges}
    if name == "bucketed":
        if len(rest) != len(k.numeric):
            raise ExportError(f"bucketed key {key!r:.60}: not {len(k.numeric)} numeric part(s)")
        floats = [f for f, _ in k.numeric if features.get(f, {}).get("kind") == "float"]
        if floats:
            raise ExportError(
                f"policy bucketed keys float feature(s) {floats}: their buckets are not integer ranges"
            )
        ranges = {
            f: bucket_range(_labelled(part, label, f), features.get(f, {}))
            for part, (f, label) in zip(rest, k.numeric, strict=True)
        }
        return {**cats, **ranges}
    raise ExportError(f"policy {name!r} is not keyed on ranges of the family's features")


def _order(entry: dict) -> tuple:
    """Categories, then ranges by their low end (None first), as a sort key."""
    out = []
    for v in entry["key"].values():
        pair = v if isinstance(v, list) else [v, v]
        out.append(tuple((x is not None, str(type(x).__name__), x if x is not None else 0) for x in pair))
    return tuple(out)


def scope_configs(scope: str, policy: Any, configs: dict, features: dict) -> dict:
    """A scope's configs per key range, and its default (the policy's fallback)."""
    if policy.name not in RANGED:
        what = "k-means clusters" if policy.name == "clustered" else "no feature"
        raise ExportError(
            f"scope {scope}: policy {policy.name} keys on {what}, not on ranges of the family's features: "
            "nothing to export per key range"
        )
    fallback = policy.candidates[policy.fallback]
    entries = []
    for key, i in policy.table.items():
        cid = policy.candidates[i]
        ranges = key_range(policy, key, features)
        if ranges:
            entries.append({"key": ranges, "candidate": cid, "config": configs[cid]})
        else:  # a key that names no feature (global's; phase-keyed's without categories): every call's
            fallback = cid
    return {
        "policy": policy.name,
        "keys": list(policy.features),
        "configs": sorted(entries, key=_order),
        "default": {"candidate": fallback, "config": configs[fallback]},
    }


def export(table: dict, scopes: dict) -> dict:
    """The JSON of a family's table per scope (see the module docstring); ExportError naming why not."""
    configs = configs_of(table)
    family = table["family"]
    features = family["features"]
    return {
        "format": "triton-configs",
        "export_version": EXPORT_VERSION,
        "study": table["study"],
        "verdict": table["verdict"],
        "decision_blake3": table["decision_blake3"],
        "family": {k: family[k] for k in ("name", "version", "spec", "source_blake3") if k in family},
        "identity": table["identity"],
        "features": {f: features[f] for f in family.get("feature_order") or features},
        "profile": dict(table["profile"]),
        "step_of_kind": dict(table.get("step_of_kind") or {}),
        "scopes": {s: scope_configs(s, p, configs, features) for s, p in sorted(scopes.items())},
    }


# ----------------------------------------------------------------------------------------------
# The Python file
# ----------------------------------------------------------------------------------------------


def _py(value: Any) -> str:
    """A JSON value as Python source (a range as a tuple)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ExportError(f"value {value!r} has no Python literal here")
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_py(k)}: {_py(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "(" + ", ".join(_py(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    return repr(value)


def _config_py(config: dict) -> str:
    options = "".join(f", {k}={config[k]!r}" for k in CONFIG_FIELDS if k in config)
    return f"triton.Config({_py(config['kwargs'])}{options})"


PY_HEAD = '''"""Triton configs per key range of kernel family {name} {version} (study {study}, verdict {verdict}),
exported by `headroom export` from the study's dispatch.json (decision BLAKE3 {decision}). Generated:
do not edit; export again after the study reruns.

CONFIGS[scope]: (key_range, triton.Config) pairs; key_range maps each feature the scope's policy keys
on to its value (a category, an exact value) or to an inclusive (low, high) range (None: unbounded);
the first whose ranges hold a call's features gives its config, and the last (key_range None) is the
default for every other call. PROFILE maps a step to the scope that serves it (a step kind through
STEP_OF_KIND: an engine's prefill-only step is served as a mixed one).
"""

import triton

FAMILY = {family}
PROFILE = {profile}
STEP_OF_KIND = {step_of_kind}
'''

PY_TAIL = '''

def _holds(want, value):
    if isinstance(want, tuple):
        low, high = want
        return (low is None or value >= low) and (high is None or value <= high)
    return value == want


def config_for(scope, **features):
    """The config of a call with these features in `scope` (a mode, or a profile part)."""
    for key, config in CONFIGS[scope]:
        if key is None or all(_holds(want, features[f]) for f, want in key.items()):
            return config
    raise KeyError(scope)
'''


def python_source(data: dict) -> str:
    """The Python file of an export (``export``'s JSON)."""
    fam = data["family"]
    head = PY_HEAD.format(
        name=fam["name"],
        version=fam.get("version", ""),
        study=data["study"],
        verdict=data["verdict"],
        decision=data["decision_blake3"][:16],
        family=_py(fam),
        profile=_py(data["profile"]),
        step_of_kind=_py(data["step_of_kind"]),
    )
    lines = ["CONFIGS = {"]
    for scope, s in data["scopes"].items():
        lines.append(f"    {scope!r}: [  # {s['policy']}, keyed on {', '.join(s['keys']) or 'nothing'}")
        for e in s["configs"]:
            lines.append(f"        ({_py(e['key'])}, {_config_py(e['config'])}),  # {e['candidate']}")
        d = s["default"]
        lines.append(f"        (None, {_config_py(d['config'])}),  # {d['candidate']}: the default")
        lines.append("    ],")
    lines.append("}")
    return head + "\n" + "\n".join(lines) + "\n" + PY_TAIL


# ----------------------------------------------------------------------------------------------
# The verb
# ----------------------------------------------------------------------------------------------


def cmd_export(args: argparse.Namespace) -> int:
    from headroom import dispatch
    from headroom.core import cli

    folder = Path(args.study_dir)
    if not (folder / dispatch.DISPATCH_NAME).exists() and not (
        folder.name == dispatch.DISPATCH_NAME and folder.exists()
    ):
        raise cli.CliError(
            f"not run: {folder} holds no {dispatch.DISPATCH_NAME} (run the pipeline: its recommendation stage "
            "writes it)",
            cli.EXIT_NOT_RUN,
        )
    try:
        table, scopes = dispatch.read_table(folder)
        data = export(table, scopes)
    except (dispatch.DispatchError, ExportError) as exc:
        raise cli.CliError(f"cannot export: {exc}") from None
    text = (
        json.dumps(data, indent=1, allow_nan=False) + "\n"
        if args.format == "triton-configs"
        else python_source(data)
    )
    if args.out is None:
        print(text, end="")
        return 0
    out = Path(args.out)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(out)
    keys = sum(len(s["configs"]) for s in data["scopes"].values())
    print(
        f"wrote {out}: {len(data['scopes'])} scope(s), {keys} key range(s) and a default each ({args.format})"
    )
    return 0
