"""Study configuration: load, validate (schema + semantics), resolve the device, apply the smoke overlay.

One place decides which device a study runs on and which shape set it uses:
`resolve(config)` returns the *study* -- the config every rule reads its params from -- with
`device` set to "cuda", "interpret" or "replay" and, for the interpreter, the `smoke` overlay merged in.
`plan_studies(config, overrides)` does it for every study the run lists (config `studies:`), once,
in the process that plans the DAG (rules/common.smk): jobs never resolve the device again.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import math
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from headroom.core import defaults
from headroom.core.contracts import FAMILY_SPEC

PROJECT_ROOT = Path(__file__).resolve().parents[2]
SCHEMA_PATH = Path(__file__).with_name("schema.yaml")  # package data: one copy, also in a wheel
STUDIES_DIR = PROJECT_ROOT / "config" / "studies"
REFERENCE_DIR = PROJECT_ROOT / "data" / "reference"
#: A study name is a folder name under results/ and a wildcard value: no slashes, no dots first.
#: Matched against the whole name (`fullmatch`: `$` would let a trailing newline through).
STUDY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
#: Keys that describe the run (which studies, which GPUs of this host), not one study.
RUN_KEYS = ("studies", "local_gpus")
#: Set by the planning process for the jobs it submits (a cluster job re-reads the workflow on its
#: node): the device each study resolved to there, so `device: auto` is never resolved again.
DEVICES_ENV = "HEADROOM_STUDY_DEVICES"

#: head_dim values the kernels support (kernels.attention validates the same set).
SUPPORTED_HEAD_DIMS = (32, 64, 128)
#: dtypes each device can run: the interpreter's bfloat16 tl.dot is wrong (Triton does not
#: support it), and the CUDA kernels are written for 16-bit inputs.
DEVICE_DTYPES = {"interpret": ("float16", "float32"), "cuda": ("float16", "bfloat16")}
MIN_BLOCK = 16  # tl.dot needs every dimension >= 16


#: How a study's request log is checked at plan time: its `trace:` section in, ValueError out.
#: The trace floor's `headroom.trace.source.check`, passed in by the plan (rules/common.smk).
SourceCheck = Callable[[dict[str, Any]], object]


#: The longest a configuration error's message may be: a value is shown cut to SHOWN_CHARS, and a
#: message that still comes out longer is cut here.
MAX_MESSAGE_CHARS = 2000
SHOWN_CHARS = 200
#: The most nodes (mappings, lists, scalars) a configuration may hold with every YAML alias expanded:
#: a few hundred bytes of nested aliases expand to billions of nodes in whatever walks the tree
#: (the schema check, a merge), so the expanded size is counted first, without expanding.
MAX_CONFIG_NODES = 10_000


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the key and the value (at most
    MAX_MESSAGE_CHARS characters: a huge value is never echoed whole)."""

    def __init__(self, message: str):
        if len(message) > MAX_MESSAGE_CHARS:
            message = message[: MAX_MESSAGE_CHARS - 40] + f" ... ({len(message):,} characters, cut)"
        super().__init__(message)


def shown(value: Any) -> str:
    """A value as a message quotes it: its repr, cut to SHOWN_CHARS characters."""
    text = repr(value)
    return text if len(text) <= SHOWN_CHARS else f"{text[:SHOWN_CHARS]}... ({len(text):,} characters)"


def expanded_nodes(data: Any, limit: int = MAX_CONFIG_NODES) -> int | None:
    """How many nodes `data` holds with every shared container counted once per place it appears
    (as YAML aliases expand), counted without expanding: each container's size once, by identity,
    with an explicit stack (no recursion). None past `limit` or for a container holding itself."""
    sizes: dict[int, int] = {}
    open_: set[int] = set()
    stack: list[tuple[Any, bool]] = [(data, False)]
    while stack:
        node, done = stack.pop()
        if not isinstance(node, dict | list):
            continue
        key = id(node)
        children = list(node.values()) if isinstance(node, dict) else node
        if done:
            total = 1 + sum(sizes[id(c)] if isinstance(c, dict | list) else 1 for c in children)
            if total > limit:
                return None
            sizes[key] = total
            open_.discard(key)
            continue
        if key in sizes:
            continue
        if key in open_:
            return None  # a recursive alias: infinite once expanded
        open_.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in children if isinstance(c, dict | list) and id(c) not in sizes)
    return sizes[id(data)] if isinstance(data, dict | list) else 1


def check_size(data: Any, where: str) -> None:
    """Refuse a configuration past MAX_CONFIG_NODES nodes once its aliases are expanded (a YAML
    "billion laughs"), before anything walks it; `where` names the file or the source."""
    if expanded_nodes(data) is None:
        raise ConfigError(
            f"{where}: the configuration holds more than {MAX_CONFIG_NODES:,} values once its YAML aliases "
            "(*name) are expanded, or an alias inside itself; a study's configuration is a few hundred "
            "values: write them out"
        )


def load(path: str | os.PathLike) -> dict[str, Any]:
    """A YAML config file as a mapping; a syntax error names the file, line and column; a file past
    MAX_CONFIG_NODES nodes once its aliases are expanded is refused (`check_size`)."""
    with open(path) as fh:
        try:
            data = yaml.safe_load(fh)
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown position"
            raise ConfigError(f"{path}, {where}: YAML syntax error: {exc.problem or exc}") from None
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: YAML syntax error: {exc}") from None
        except RecursionError:
            raise ConfigError(
                f"{path}: YAML nested too deeply to read; a configuration is a few levels deep"
            ) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    check_size(data, str(path))
    return data


@functools.cache
def _schema() -> dict[str, Any]:
    with open(SCHEMA_PATH) as fh:
        return yaml.safe_load(fh)


def _key(path) -> str:
    parts = []
    for p in path:
        parts.append(f"[{p}]" if isinstance(p, int) else ("." if parts else "") + str(p))
    return "".join(parts) or "<top level>"


def validate_schema(config: dict[str, Any]) -> None:
    """JSON-schema check with a message naming the offending key and value (and, past an upper
    bound, the schema's reason for it); a NaN or infinite number anywhere is refused too."""
    import jsonschema

    check_size(config, "the configuration")
    validator = jsonschema.Draft202012Validator(_schema())
    errors = sorted(validator.iter_errors(config), key=lambda e: (len(e.absolute_path), str(e.absolute_path)))
    if errors:
        err = errors[0]
        key = _key(err.absolute_path)
        why = (
            f"; {err.schema['description']}"
            if err.validator == "maximum" and "description" in err.schema
            else ""
        )
        if err.validator == "additionalProperties":  # the keys named; the mapping holding them is not shown
            unknown = sorted(set(err.instance) - set(err.schema.get("properties", {})), key=str)
            raise ConfigError(
                f"config key '{key}': unknown key(s) {', '.join(shown(k) for k in unknown)}; known: "
                f"{', '.join(sorted(err.schema.get('properties', {})))}"
            )
        raise ConfigError(f"config key '{key}': {_cut(err.message)} (value: {shown(err.instance)}){why}")
    path = _non_finite(config, ())
    if path is not None:
        raise ConfigError(
            f"config key '{_key(path)}': {_at(config, path)!r} is not a finite number; every number of a "
            "study is finite (a missing bound is null where the schema allows it)"
        )


def _cut(text: str) -> str:
    return text if len(text) <= SHOWN_CHARS else f"{text[:SHOWN_CHARS]}... ({len(text):,} characters)"


def _non_finite(node: Any, path: tuple) -> tuple | None:
    """The path of the first NaN or infinite float in a config tree, or None."""
    if isinstance(node, float):
        return None if math.isfinite(node) else path
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        found = _non_finite(value, (*path, key))
        if found is not None:
            return found
    return None


def _at(node: Any, path) -> Any:
    for key in path:
        node = node[key]
    return node


#: JSON-schema types a --config string may be read as (bool is no integer here).
_SCHEMA_TYPES = {
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


def type_cli_values(values: dict[str, Any]) -> dict[str, Any]:
    """--config values typed as the schema types them, in place (returns `values`).

    Snakemake reads a nested --config value (`decision={max_gap_to_oracle_pct: 2.0}`) with YAML's
    BaseLoader, which keeps every scalar a string. Each string where the schema wants a number, an
    integer, a boolean or null becomes what YAML reads it as, when that is of a wanted type; any
    other string is left for the schema check to refuse. A `smoke` overlay is typed like a study."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(_schema())
    trees = [values] + ([values["smoke"]] if isinstance(values.get("smoke"), dict) else [])
    for tree in trees:
        for err in validator.iter_errors(tree):
            if err.validator != "type" or not isinstance(err.instance, str) or not err.absolute_path:
                continue
            wanted = [err.validator_value] if isinstance(err.validator_value, str) else err.validator_value
            try:
                parsed = yaml.safe_load(err.instance)
            except yaml.YAMLError:
                continue
            if any(_SCHEMA_TYPES.get(t, lambda v: False)(parsed) for t in wanted):
                *parents, last = err.absolute_path
                _at(tree, parents)[last] = parsed
    return values


def deep_merge(base: dict[str, Any], overlay: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in overlay.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def cuda_visible() -> bool:
    """True when torch sees a CUDA device (imports torch, so only called for device: auto)."""
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def resolve_device(requested: str) -> str:
    """auto -> cuda when a GPU is visible, else interpret. Explicit values are kept as given, so a
    cluster head node without a GPU can still plan a `device: cuda` study for its GPU nodes."""
    if requested not in ("auto", "cuda", "interpret"):
        raise ConfigError(f"config key 'device': {requested!r} is not one of auto, cuda, interpret")
    if requested == "auto":
        return "cuda" if cuda_visible() else "interpret"
    return requested


def make_importable(project_root: str | os.PathLike) -> None:
    """Put the project on PYTHONPATH, so every job's script process (they inherit the environment)
    imports `headroom` and `kernels` from this checkout, installed or not."""
    current = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(project_root), current) if p)


def _is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def check_family(study: dict[str, Any]) -> None:
    """The study's `family:` is null (the built-in attention kernels) or `package.module:ATTRIBUTE`;
    whether it imports is the trace stage's to say (it imports the family), not the plan's."""
    family = study.get("family")
    if family is not None and not (isinstance(family, str) and FAMILY_SPEC.fullmatch(family)):
        raise ConfigError(
            f"config key 'family': {shown(family)} must be `package.module:ATTRIBUTE` (e.g. "
            "examples.rmsnorm.family:FAMILY), importable from the project root or installed; null: the "
            "built-in attention kernels"
        )


def check_semantics(study: dict[str, Any], *, check_dtype: bool = True) -> None:
    """Checks a schema cannot express, on a study (its `device` already resolved)."""
    check_family(study)
    part = study["partition"]
    if part["heads_q"] % part["heads_kv"]:
        raise ConfigError(
            f"config key 'partition.heads_q': {part['heads_q']} is not a multiple of "
            f"partition.heads_kv = {part['heads_kv']} (GQA shares each KV head among heads_q/heads_kv query heads)"
        )
    if part["head_dim"] not in SUPPORTED_HEAD_DIMS:
        raise ConfigError(
            f"config key 'partition.head_dim': {part['head_dim']} is not supported; use one of {SUPPORTED_HEAD_DIMS}"
        )
    device = study["device"]
    if check_dtype and part["dtype"] not in DEVICE_DTYPES[device]:
        raise ConfigError(
            f"config key 'partition.dtype': {part['dtype']!r} cannot run on device {device!r}; "
            f"supported there: {', '.join(DEVICE_DTYPES[device])}"
        )
    seen: dict[tuple, int] = {}
    for i, tile in enumerate(study["tiles"]):
        for dim in ("block_m", "block_n"):
            v = tile[dim]
            if not _is_pow2(v) or v < MIN_BLOCK:
                raise ConfigError(f"config key 'tiles[{i}].{dim}': {v} must be a power of two >= {MIN_BLOCK}")
        key = (tile["block_m"], tile["block_n"], tile["num_warps"], tile["num_stages"])
        if key in seen:
            raise ConfigError(
                f"config key 'tiles[{i}]': {tile} duplicates tiles[{seen[key]}]; tile definitions must be unique"
            )
        seen[key] = i
    if study["generation"] == 1 and "q_fused" in study["rope"]:
        raise ConfigError(
            "config key 'rope': q_fused is a generation-2 placement; generation 1 has unfused and fused only"
        )
    tf = study["policies"]["train_fraction"]
    if not 0 < tf < 1:
        raise ConfigError(f"config key 'policies.train_fraction': {tf} must lie strictly between 0 and 1")
    n = study["trace"]["invocations"]
    n_train = int(n * tf)
    if n_train < 1 or n - n_train < 1:
        raise ConfigError(
            f"config key 'trace.invocations': {n} invocations leave no train or no test invocation "
            f"at policies.train_fraction = {tf}"
        )
    sweep = study["graph_sweep"]
    gs_tile = sweep["tile"] if "tile" in sweep else defaults.value("graph_sweep", "tile")
    if gs_tile >= len(study["tiles"]):
        raise ConfigError(
            f"config key 'graph_sweep.tile': {gs_tile} is not an index into tiles (0..{len(study['tiles']) - 1})"
        )


def resolve(
    config: dict[str, Any], *, cuda_available: bool | None = None, check_source: SourceCheck | None = None
) -> dict[str, Any]:
    """Validate `config` and return the study: device resolved, smoke overlay applied for the
    interpreter, and checked again (schema and semantics) after the overlay. `check_source`: the
    request-log check the plan passes in (`check_trace_source`).

    `replay` studies keep the configured (GPU) settings: their measurements were made elsewhere."""
    validate_schema(config)
    requested = config["device"]
    replay = config.get("replay")
    if replay:
        device = "replay"  # measured elsewhere: this machine's GPU is not asked (no torch import)
    elif cuda_available is not None and requested == "auto":
        device = "cuda" if cuda_available else "interpret"
    else:
        device = resolve_device(requested)
    study = {k: copy.deepcopy(v) for k, v in config.items() if k != "smoke"}
    if replay:
        replay_dir = Path(replay)
        if not replay_dir.is_absolute():
            replay_dir = PROJECT_ROOT / replay_dir
        if not replay_dir.is_dir():
            raise ConfigError(f"config key 'replay': {replay!r} is not a directory of recorded artifacts")
        study["replay"] = str(replay_dir)
    elif device == "interpret":
        # The configured (GPU) study must be valid too, even when this machine runs only its smoke
        # overlay: a bad value must not wait for the first GPU run to be found.
        check_semantics({**study, "device": "cuda"}, check_dtype=requested == "auto")
        overlay = config.get("smoke") or {}
        study = deep_merge(study, overlay)
        with _named_in(overlay):
            validate_schema(study)
            check_semantics({**study, "device": device})
            check_trace_source(study, check_source)
        if config["trace"]["source"] != study["trace"]["source"]:
            check_trace_source(config, check_source)
    study["device"] = device
    if device == "cuda":
        check_semantics(study)
        check_trace_source(study, check_source)
    return study


def check_trace_source(study: dict[str, Any], check: SourceCheck | None) -> None:
    """The study's request log checked by `check`, the trace floor's `headroom.trace.source.check`
    that the plan passes in (rules/common.smk: core imports nothing above itself), before any job;
    its ValueError becomes a ConfigError naming `trace.source`. None: not checked (a caller that
    builds no trace); the synthetic source needs no check."""
    if check is None or study["trace"]["source"] == "synthetic":
        return
    try:
        check(study["trace"])
    except ValueError as exc:
        msg = str(exc)
        raise ConfigError(
            msg if msg.startswith("config key") else f"config key 'trace.source': {msg}"
        ) from None


_KEY_IN_MESSAGE = re.compile(r"config key '([^']+)'")


@contextlib.contextmanager
def _named_in(overlay: dict[str, Any]):
    """A ConfigError about a key the `smoke` overlay sets names it `smoke.<key>`: that is where to fix it."""
    try:
        yield
    except ConfigError as exc:
        match = _KEY_IN_MESSAGE.search(str(exc))
        if not match or not _sets(overlay, match.group(1)):
            raise
        key = match.group(1)
        raise ConfigError(str(exc).replace(f"config key '{key}'", f"config key 'smoke.{key}'", 1)) from None


def _sets(overlay: dict[str, Any], key: str) -> bool:
    """Whether the overlay sets `key` (e.g. 'portfolio.reps', 'tiles[2].block_n') or a list holding it."""
    node: Any = overlay
    for part in re.split(r"\.|\[", key):
        if isinstance(node, list):
            return True
        part = part.rstrip("]")
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


# -- studies ------------------------------------------------------------------------------------


def replay_study_name(replay_dir: str | os.PathLike) -> str:
    """The study a recorded folder replays as: data/reference/<gpu>/<study> -> replay-<gpu>-<study>,
    any other folder -> replay-<its name>."""
    path = Path(replay_dir)
    path = (path if path.is_absolute() else PROJECT_ROOT / path).resolve()
    try:
        gpu, study = path.relative_to(REFERENCE_DIR.resolve()).parts[:2]
        return f"replay-{gpu}-{study}"
    except ValueError:
        return f"replay-{path.name}"


def study_names(config: dict[str, Any]) -> list[str]:
    """The studies this run builds: config `studies:` (default: the default study), or the one replay
    study `--config replay=DIR` names. Duplicates and names that cannot be folders are refused."""
    if config.get("replay"):
        name = replay_study_name(config["replay"])
        if not STUDY_NAME.fullmatch(name):
            raise ConfigError(
                f"config key 'replay': {config['replay']!r} would replay as study {name!r}, but a study name "
                "must be letters, digits, '-' or '_' (it names the folder results/<study>/); copy or rename "
                "the recorded folder"
            )
        return [name]
    names = config.get("studies") or ["default"]
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ConfigError(f"config key 'studies': expected a list of study names, got {shown(names)}")
    seen = set()
    for name in names:
        if not STUDY_NAME.fullmatch(name):
            raise ConfigError(
                f"config key 'studies': study name {name!r} must be letters, digits, '-' or '_' "
                "(it names the folder results/<study>/)"
            )
        if name in seen:
            raise ConfigError(f"config key 'studies': study {name!r} is listed twice; each study runs once")
        seen.add(name)
    return list(names)


def _reference_replay(name: str) -> Path | None:
    """replay-<gpu>-<study> -> data/reference/<gpu>/<study>, when that folder exists."""
    if not name.startswith("replay-") or not REFERENCE_DIR.is_dir():
        return None
    for gpu_dir in sorted(p for p in REFERENCE_DIR.iterdir() if p.is_dir()):
        prefix = f"replay-{gpu_dir.name}-"
        if name.startswith(prefix) and (gpu_dir / name[len(prefix) :]).is_dir():
            return gpu_dir / name[len(prefix) :]
    return None


def study_config(
    name: str, config: dict[str, Any], overrides: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The unresolved config of study `name`: config.yaml (as Snakemake loaded it), then the study's
    overlay config/studies/<name>.yaml, then the command line's --config values (`overrides`), which
    win over every file. A replay study takes its measurements from its recorded folder."""
    base = {k: v for k, v in config.items() if k not in RUN_KEYS}
    if config.get("replay") or name == "default":
        return base
    overlay_path = STUDIES_DIR / f"{name}.yaml"
    if overlay_path.is_file():
        overlay = load(overlay_path)
        for key in RUN_KEYS:
            if key in overlay:
                raise ConfigError(
                    f"{overlay_path.relative_to(PROJECT_ROOT)}: key '{key}' belongs to the run (config.yaml "
                    "or --config), not to one study"
                )
        cli = {k: v for k, v in (overrides or {}).items() if k not in RUN_KEYS}
        return deep_merge(deep_merge(base, overlay), cli)
    recorded = _reference_replay(name)
    if recorded is not None:
        return {**base, "replay": str(recorded.relative_to(PROJECT_ROOT))}
    known = ["default"] + sorted(p.stem for p in STUDIES_DIR.glob("*.yaml"))
    raise ConfigError(
        f"config key 'studies': unknown study {name!r}: no config/studies/{name}.yaml and no recorded "
        f"folder data/reference/<gpu>/<study> for a replay-<gpu>-<study> name; known studies: "
        f"{', '.join(known)}"
    )


def check_results_dir(results: str | os.PathLike) -> None:
    """results/ must be a writable folder (or creatable): say so before any job runs."""
    path = Path(results)
    if path.exists() and not path.is_dir():
        raise ConfigError(
            f"{path} exists and is not a folder: the pipeline writes its studies under it; move it away"
        )
    probe = path if path.exists() else path.parent
    if not os.access(probe if str(probe) else ".", os.W_OK | os.X_OK):
        raise ConfigError(f"{probe.resolve()} is not writable: the pipeline cannot write {path}/")


def check_replay_source(name: str, replay_dir: str | os.PathLike, results: str | os.PathLike) -> None:
    """A replay folder must not overlap the study's own destination (replaying results/ onto itself
    deletes what it reads)."""
    src = Path(replay_dir).resolve()
    dest = (Path(results) / name).resolve()
    if src == dest or src in dest.parents or dest in src.parents:
        raise ConfigError(
            f"study {name!r}: config key 'replay': {replay_dir} overlaps the study's own results folder "
            f"{results}/{name}/; replay a recorded folder of another study (e.g. results/<other study> "
            "or data/reference/<gpu>/<study>)"
        )


def plan_studies(
    config: dict[str, Any],
    overrides: dict[str, Any] | None = None,
    *,
    cuda_available: bool | None = None,
    recorded_devices: dict[str, str] | None = None,
    results: str | os.PathLike = "results",
    check_source: SourceCheck | None = None,
) -> dict[str, dict[str, Any]]:
    """Every study of the run, resolved once: {name: study}. `recorded_devices` (the planning
    process's resolution, read back by a cluster job) wins over looking at this machine;
    `check_source` checks each measured study's request log (`check_trace_source`)."""
    studies = {}
    for name in study_names(config):
        try:
            raw = study_config(name, config, overrides)
            if recorded_devices and name in recorded_devices and raw.get("device") == "auto":
                device = recorded_devices[name]
                raw = {**raw, "device": device if device != "replay" else "auto"}
            study = resolve(raw, cuda_available=cuda_available, check_source=check_source)
        except ConfigError as exc:
            msg = str(exc)
            raise ConfigError(
                msg if msg.startswith(f"study {name!r}") else f"study {name!r}: {msg}"
            ) from None
        if study.get("replay"):
            check_replay_source(name, study["replay"], results)
        study["name"] = name
        studies[name] = study
    return studies


def devices_env(studies: dict[str, dict[str, Any]]) -> str:
    return json.dumps({name: s["device"] for name, s in studies.items()}, sort_keys=True)


def gpu_assignment(names: list[str], local_gpus: list[int] | None) -> dict[str, int | None]:
    """Which GPU of this host each study's GPU jobs use: studies take `local_gpus` in turn (round
    robin), so two studies' jobs overlap only on different GPUs; None: one shared GPU (`gpu=1`)."""
    if not local_gpus:
        return {name: None for name in names}
    try:
        local_gpus = [int(g) for g in local_gpus]  # --config local_gpus=[0,1] gives strings
    except (TypeError, ValueError):
        local_gpus = []
    if not local_gpus or len(set(local_gpus)) != len(local_gpus) or min(local_gpus) < 0:
        raise ConfigError(f"config key 'local_gpus': {local_gpus!r} must list distinct GPU indices >= 0")
    return {name: local_gpus[i % len(local_gpus)] for i, name in enumerate(names)}
