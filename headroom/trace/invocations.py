"""The trace: a time-ordered list of attention invocations the study times every candidate on.

One model turns requests into invocations (headroom.trace.requests; docs/traces.md): each request
prefills its context at arrival, then decodes in a continuous-batching engine. The requests come
from either source:

- `trace.source: synthetic`: a seeded chat-like request log (exponential inter-arrival gaps;
  prompt lengths drawn from a short list and a uniform number of generated tokens, or both
  lognormal and clipped: `trace.synthetic.lengths`);
- `trace.source: <path>`: a real request log (CSV or Parquet; relative paths resolve against the
  project root) whose columns `trace.columns` maps.

Then, in this order: token scaling and clipping (`trace.tokens`), the batching model
(`trace.batching`), the time window (`trace.window`), the chronological sampler
(`trace.invocations`, `trace.sampler`) and rounding of q_len/kv_len up to `trace.round_to`.

    df = build_trace(study["trace"], study["partition"], base_dir=".")  # relative sources: from here
    print(describe_text(df, train_fraction=0.5))
"""

from __future__ import annotations

import copy
import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from headroom.core import artifacts, contracts, defaults
from headroom.trace import prefix_cache, serving
from headroom.trace.requests import (
    DECODE,
    NS_PER_S,
    PREFILL,
    STEP_KIND,
    STEP_KIND_OF_PHASE,
    STEPS,
    Requests,
    read_request_log,
)
from headroom.trace.steps import simulate

SAMPLERS = ("stride", "head", "stratified")
KV_SUMMARIES = ("max", "mean", "per_sequence")
#: The serving columns (contracts.TRACE): written when the trace models serving (a prefix cache,
#: chunked prefill or per-sequence decode lengths), absent otherwise, so older studies' traces keep
#: their columns.
SERVING_COLUMNS = ("step", "cached_tokens", "kv_lens")
#: Columns every trace has, in order (the contract in headroom/core/contracts.py); a serving trace
#: adds SERVING_COLUMNS after them.
#: The stratified sampler's column: how many of the window's invocations each one stands for.
WEIGHT = "weight"
COLUMNS = tuple(c for c in contracts.TRACE.names if c not in (*SERVING_COLUMNS, WEIGHT))
PARTITION_KEYS = ("heads_q", "heads_kv", "head_dim", "dtype")


def shape_key(
    phase: str,
    batch: int,
    q_len: int,
    kv_len: int,
    heads_q: int,
    heads_kv: int,
    head_dim: int,
    dtype: str,
    kv_summary: str = "exact",
    kv_mean: int | None = None,
) -> str:
    """Canonical shape key, e.g. 'prefill|b1|q512|kv512|h32/8|d128|bfloat16' or, for a decode
    batch whose sequences' kv_len are summarized by their maximum, 'decode|b4|q1|kvmax1040|...';
    a decode batch that keeps every sequence's kv_len (per_sequence) names its longest and its
    mean (rounded up), 'decode|b4|q1|kvvar1040m528|...'. Equal shapes (and summaries) give equal
    keys; nothing else goes into the key."""
    if kv_summary == "per_sequence":
        kv = f"kvvar{kv_len}m{kv_mean}"
    else:
        kv = f"kv{kv_len}" if kv_summary == "exact" else f"kv{kv_summary}{kv_len}"
    return f"{phase}|b{batch}|q{q_len}|{kv}|h{heads_q}/{heads_kv}|d{head_dim}|{dtype}"


# -- configuration -------------------------------------------------------------------------------


def settings(trace_cfg: dict[str, Any]) -> dict[str, Any]:
    """The `trace:` section merged onto the default study's and checked; ValueError names the key."""
    cfg = _merge(trace_cfg)
    check = _Checker(cfg)
    check.need(
        isinstance(cfg["source"], str) and cfg["source"] != "", "source", "must be 'synthetic' or a path"
    )
    if cfg["invocations"] is not None:
        check.pos_int("invocations")
    check.need(cfg["sampler"] in SAMPLERS, "sampler", f"must be one of {SAMPLERS}")
    check.pos_int("stratified.min_per_kind")
    check.need(isinstance(cfg["seed"], int) and cfg["seed"] >= 0, "seed", "must be an integer >= 0")
    check.pos_int("round_to")
    check.need(
        all(isinstance(v, str) and v for k, v in cfg["columns"].items() if k != "hash_ids"),
        "columns",
        "must map each role to a non-empty column name",
    )
    hashes = cfg["columns"]["hash_ids"]
    check.need(
        hashes is None or (isinstance(hashes, str) and hashes != ""),
        "columns.hash_ids",
        "must be a column name or null",
    )
    check.need(
        cfg["arrival_format"] is None or isinstance(cfg["arrival_format"], str),
        "arrival_format",
        "must be a strptime format or null",
    )
    _check_synthetic(check, cfg["synthetic"])
    _check_tokens(check, cfg["tokens"], cfg["round_to"])
    _check_batching(check, cfg["batching"])
    _check_prefix_cache(check, cfg["prefix_cache"])
    _check_window(check, cfg["window"])
    return cfg


def _merge(trace_cfg: dict[str, Any]) -> dict[str, Any]:
    """`trace_cfg` over the default study's `trace:` section, one level deep; unknown keys refused."""
    base = defaults.section("trace")
    unknown = sorted(set(trace_cfg) - set(base))
    if unknown:
        raise ValueError(f"config key 'trace.{unknown[0]}': unknown; known keys: {sorted(base)}")
    for key, value in trace_cfg.items():
        if isinstance(base[key], dict):
            if not isinstance(value, dict):
                raise ValueError(f"config key 'trace.{key}': expected a mapping, got {value!r}")
            bad = sorted(set(value) - set(base[key]))
            if bad:
                raise ValueError(
                    f"config key 'trace.{key}.{bad[0]}': unknown; known keys: {sorted(base[key])}"
                )
            base[key].update(copy.deepcopy(value))
        else:
            base[key] = copy.deepcopy(value)
    return base


def _is_pos_num(value: Any) -> bool:
    return (
        isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value > 0
    )


class _Checker:
    """Checks on the merged `trace:` section; each failure names `trace.<key>` and the value."""

    def __init__(self, cfg: dict[str, Any]):
        self.cfg = cfg

    def value(self, key: str) -> Any:
        value = self.cfg
        for part in key.replace("[", ".").replace("]", "").split("."):
            value = value[int(part)] if isinstance(value, list) else value[part]
        return value

    def need(self, ok: bool, key: str, what: str) -> None:
        if not ok:
            raise ValueError(f"config key 'trace.{key}': {self.value(key)!r} {what}")

    def pos_int(self, key: str) -> None:
        value = self.value(key)
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= 1
        self.need(ok, key, "must be an integer >= 1")


def _check_synthetic(check: _Checker, syn: dict[str, Any]) -> None:
    check.pos_int("synthetic.requests")
    check.need(_is_pos_num(syn["mean_gap_s"]), "synthetic.mean_gap_s", "must be a number > 0")
    prompts = syn["prompt_tokens"]
    ok = isinstance(prompts, list) and len(prompts) > 0
    check.need(ok, "synthetic.prompt_tokens", "must be a non-empty list")
    for i in range(len(prompts)):
        check.pos_int(f"synthetic.prompt_tokens[{i}]")
    gen = syn["generated_tokens"]
    check.need(isinstance(gen, list) and len(gen) == 2, "synthetic.generated_tokens", "must be [min, max]")
    check.pos_int("synthetic.generated_tokens[0]")
    check.pos_int("synthetic.generated_tokens[1]")
    check.need(gen[0] <= gen[1], "synthetic.generated_tokens", "must be [min, max] with min <= max")
    check.need(syn["lengths"] in LENGTHS, "synthetic.lengths", f"must be one of {LENGTHS}")
    for key in ("prompt_median", "generated_median"):
        check.need(_is_pos_num(syn[key]), f"synthetic.{key}", "must be a number > 0")
    for key in ("prompt_sigma", "generated_sigma"):
        ok = _is_pos_num(syn[key]) or (syn[key] == 0 and not isinstance(syn[key], bool))
        check.need(ok, f"synthetic.{key}", "must be a number >= 0")


def _check_tokens(check: _Checker, tok: dict[str, Any], round_to: int) -> None:
    check.need(_is_pos_num(tok["scale"]), "tokens.scale", "must be a number > 0")
    if tok["max_kv_len"] is None:
        return
    check.pos_int("tokens.max_kv_len")
    room = "must leave room for a prompt token and a generated token (>= 2)"
    check.need(tok["max_kv_len"] >= 2, "tokens.max_kv_len", room)
    multiple = f"must be a multiple of trace.round_to = {round_to}"
    check.need(tok["max_kv_len"] % round_to == 0, "tokens.max_kv_len", multiple)


def _check_batching(check: _Checker, bat: dict[str, Any]) -> None:
    check.pos_int("batching.max_batch")
    step = bat["decode_step_s"]
    check.need(
        _is_pos_num(step) and round(step * NS_PER_S) >= 1,
        "batching.decode_step_s",
        "must be a number >= 1e-9",
    )
    check.need(bat["kv_summary"] in KV_SUMMARIES, "batching.kv_summary", f"must be one of {KV_SUMMARIES}")
    if bat["max_batched_tokens"] is not None:
        check.pos_int("batching.max_batched_tokens")
        more = f"must be more than trace.batching.max_batch = {bat['max_batch']} (each decode takes a token of it)"
        check.need(bat["max_batched_tokens"] > bat["max_batch"], "batching.max_batched_tokens", more)


def _check_prefix_cache(check: _Checker, cache: dict[str, Any]) -> None:
    check.pos_int("prefix_cache.block_tokens")
    if cache["capacity_blocks"] is not None:
        check.pos_int("prefix_cache.capacity_blocks")
    check.need(_is_pos_num(cache["kv_budget_gb"]), "prefix_cache.kv_budget_gb", "must be a number > 0")
    check.pos_int("prefix_cache.layers")


def _check_window(check: _Checker, win: dict[str, Any]) -> None:
    start = win["start_s"]
    ok = isinstance(start, int | float) and not isinstance(start, bool) and start >= 0
    check.need(ok, "window.start_s", "must be a number >= 0")
    if win["duration_s"] is not None:
        check.need(_is_pos_num(win["duration_s"]), "window.duration_s", "must be a number > 0 or null")
    if win["max_invocations"] is not None:
        check.pos_int("window.max_invocations")


def _partition(partition: dict[str, Any]) -> dict[str, Any]:
    missing = [k for k in PARTITION_KEYS if k not in partition]
    if missing:
        raise ValueError(f"config key 'partition.{missing[0]}': missing; the trace needs {PARTITION_KEYS}")
    return {k: partition[k] for k in PARTITION_KEYS}


def resolve_source(source: str, base_dir: str | Path = ".") -> Path | None:
    """None for 'synthetic'; else the request log's path (relative paths against base_dir)."""
    if source == "synthetic":
        return None
    path = Path(source)
    return path if path.is_absolute() else Path(base_dir) / path


# -- requests -------------------------------------------------------------------------------------


#: How the synthetic log draws token counts (`trace.synthetic.lengths`).
LENGTHS = ("choice", "lognormal")


def synthetic_requests(syn: dict[str, Any], seed: int) -> Requests:
    """A seeded chat-like request log: Poisson arrivals (mean gap `mean_gap_s`), then per request
    a context and a generated token count. `lengths: choice`: the context drawn uniformly from the
    list `prompt_tokens`, generation uniform in `generated_tokens` = [min, max]. `lengths:
    lognormal`: both lognormal (`*_median` = exp(mu), `*_sigma` of the log), rounded to integers and
    clipped to [min, max] of `prompt_tokens` and of `generated_tokens`."""
    rng = np.random.default_rng(seed)
    n = syn["requests"]
    gaps_s = rng.exponential(syn["mean_gap_s"], size=n)
    gaps_s[0] = 0.0  # the log starts with its first request
    arrival_ns = np.round(np.cumsum(gaps_s) * NS_PER_S).astype(np.int64)
    lo, hi = syn["generated_tokens"]
    if syn["lengths"] == "lognormal":
        prompts = syn["prompt_tokens"]
        context = _lognormal(rng, syn["prompt_median"], syn["prompt_sigma"], n, min(prompts), max(prompts))
        generated = _lognormal(rng, syn["generated_median"], syn["generated_sigma"], n, lo, hi)
    else:
        context = rng.choice(np.asarray(syn["prompt_tokens"], dtype=np.int64), size=n)
        generated = rng.integers(lo, hi + 1, size=n, dtype=np.int64)
    return Requests(arrival_ns, context, generated, np.arange(1, n + 1, dtype=np.int64))


def _lognormal(rng: np.random.Generator, median: float, sigma: float, n: int, lo: int, hi: int) -> np.ndarray:
    x = rng.lognormal(math.log(median), sigma, size=n)
    return np.clip(np.rint(x), lo, hi).astype(np.int64)


def scale_tokens(requests: Requests, scale: float, max_kv_len: int | None) -> Requests:
    """Token counts times `scale` (rounded half up, at least 1), then clipped so that a sequence
    never exceeds max_kv_len: context to max_kv_len - 1, generated to max_kv_len - context; cached
    prefix tokens scaled alike and kept below the context."""
    context, generated, cached = requests.context, requests.generated, requests.cached
    if scale != 1.0:
        context = np.maximum(1, np.floor(context * float(scale) + 0.5)).astype(np.int64)
        generated = np.maximum(1, np.floor(generated * float(scale) + 0.5)).astype(np.int64)
        cached = None if cached is None else np.floor(cached * float(scale) + 0.5).astype(np.int64)
    if max_kv_len is not None:
        context = np.minimum(context, max_kv_len - 1)
        generated = np.minimum(generated, max_kv_len - context)
    if cached is not None:
        cached = np.minimum(cached, context - 1)
    return dataclasses.replace(requests, context=context, generated=generated, cached=cached)


def round_up(values: np.ndarray, multiple: int) -> np.ndarray:
    """Round up to a multiple (values are >= 1, so the result is >= multiple)."""
    return (np.ceil(np.asarray(values, dtype=np.float64) / multiple) * multiple).astype(np.int64)


# -- the trace ------------------------------------------------------------------------------------


def _sample(n: int, count: int | None, sampler: str) -> np.ndarray:
    """Indices of `count` of n invocations, ascending (chronological)."""
    if count is None or count >= n:
        return np.arange(n, dtype=np.int64)
    if sampler == "head":
        return np.arange(count, dtype=np.int64)
    return (np.arange(count, dtype=np.int64) * n) // count  # stride: floor(i * n / count)


def allocation(sizes: dict[str, int], count: int, min_per_kind: int) -> dict[str, int]:
    """How many of ``count`` invocations each step kind gets: at least ``min_per_kind`` (all of a kind
    that holds fewer), the rest in proportion to what each kind has left in the window (largest
    remainders), never more than a kind holds. A floor the count cannot give every kind is lowered to
    an equal share."""
    floor = min(min_per_kind, count // max(len(sizes), 1))
    take = {k: min(n, floor) for k, n in sizes.items()}
    left = count - sum(take.values())
    while left > 0:
        room = {k: sizes[k] - take[k] for k in sizes if sizes[k] > take[k]}
        if not room:
            break
        total = sum(room.values())
        share = {k: left * r / total for k, r in room.items()}
        add = {k: min(room[k], int(share[k])) for k in room}
        for k in sorted(room, key=lambda k: (share[k] - int(share[k]), room[k]), reverse=True):
            if sum(add.values()) >= left:
                break
            if add[k] < room[k]:
                add[k] += 1
        for k, a in add.items():
            take[k] += a
        left -= sum(add.values())
    return take


def stratified(kinds: np.ndarray, count: int | None, min_per_kind: int) -> tuple[np.ndarray, np.ndarray]:
    """(indices ascending, weight of each) of a sample of the window's invocations whose step kinds are
    ``kinds``: ``allocation`` per kind, stride sampling within a kind; weight = the kind's invocations
    in the window over those sampled, so weighted sums over the sample are unbiased for the window's."""
    names, codes = np.unique(kinds, return_inverse=True)
    sizes = {str(k): int((codes == i).sum()) for i, k in enumerate(names)}
    take = allocation(sizes, len(kinds) if count is None else min(count, len(kinds)), min_per_kind)
    idx, weight = [], []
    for i, k in enumerate(names):
        members = np.flatnonzero(codes == i)
        picked = members[_sample(len(members), take[str(k)], "stride")]
        idx.append(picked)
        weight.append(np.full(len(picked), len(members) / max(len(picked), 1)))
    idx, weight = np.concatenate(idx), np.concatenate(weight)
    order = np.argsort(idx, kind="stable")
    return idx[order], weight[order]


def sample(
    n: int, cfg: dict[str, Any], kinds: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray | None]:
    """The trace's sampler (`trace.invocations`, `trace.sampler`, `trace.stratified.min_per_kind` of
    resolved settings) over n invocations in chronological order: (indices ascending, weight of each
    or None). `stratified` needs each invocation's step kind (`kinds`) and gives the weights; `stride`
    and `head` give None. The attention trace samples the window's invocations with it, a kernel
    family's trace (headroom.families.study) the calls its steps expand to."""
    if cfg["sampler"] == "stratified":
        if kinds is None or len(kinds) != n:
            raise ValueError("the stratified sampler needs one step kind per invocation")
        return stratified(np.asarray(kinds), cfg["invocations"], cfg["stratified"]["min_per_kind"])
    return _sample(n, cfg["invocations"], cfg["sampler"]), None


def step_kinds(phase: np.ndarray, step: np.ndarray | None) -> np.ndarray:
    """Each invocation's step kind (decode-only or mixed) from its phase codes and, where the engine
    records them, its step codes (requests.STEP_KIND)."""
    if step is not None:
        return np.asarray([STEP_KIND[s] for s in STEPS])[step]
    return np.where(phase == PREFILL, STEP_KIND_OF_PHASE["prefill"], STEP_KIND_OF_PHASE["decode"])


def build_trace(
    trace_cfg: dict[str, Any], partition: dict[str, Any], *, base_dir: str | Path = "."
) -> pd.DataFrame:
    """The trace for a `trace:` config section and a partition {heads_q, heads_kv, head_dim, dtype}:
    a DataFrame with COLUMNS (and, serving, SERVING_COLUMNS) in chronological order. Bad config, a bad request log or an empty
    window raise ValueError."""
    return build(trace_cfg, partition, base_dir=base_dir)[0]


def build(
    trace_cfg: dict[str, Any], partition: dict[str, Any], *, base_dir: str | Path = "."
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """build_trace plus its provenance (for stage.write's extra_provenance): the resolved
    settings, the source file's BLAKE3 and size, and the window's invocation counts."""
    cfg = settings(trace_cfg)
    part = _partition(partition)
    path, requests, cache = served_requests(cfg, part, base_dir)
    stream, in_window = _window(requests, cfg, _where(path))
    kinds = None
    if cfg["sampler"] == "stratified":
        step = None if stream.step is None else stream.step[in_window]
        kinds = step_kinds(stream.phase[in_window], step)
    chosen, weight = sample(in_window.size, cfg, kinds)
    picked = in_window[chosen]
    df = _invocations(stream.take(picked), picked, requests, cfg, part)
    if weight is not None:
        df[WEIGHT] = weight
    facts = {}
    if is_serving(cfg):
        df = _serving_columns(df, stream, picked, cfg)
        facts["serving"] = serving.window_facts(stream, in_window)
    provenance = {
        "source": cfg["source"],
        "source_blake3": None if path is None else artifacts.hash_file(path),
        "source_bytes": None if path is None else path.stat().st_size,
        "source_requests": len(requests),
        "settings": cfg,
        "window_invocations": int(in_window.size),
        "window_prefills": int(np.count_nonzero(stream.phase[in_window] == PREFILL)),
        "window_decodes": int(np.count_nonzero(stream.phase[in_window] == DECODE)),
        "shape_key_format": "phase|b<batch>|q<q_len>|kv[<max|mean>]<kv_len>|h<heads_q>/<heads_kv>|d<head_dim>|<dtype>"
        + " (per_sequence decodes: kvvar<max>m<mean>)",
    }
    if cache is not None:
        provenance["prefix_cache"] = cache
    clipped = _clipped(requests, cfg["tokens"]["max_kv_len"])
    if clipped:
        provenance["tokens_clipped"] = clipped
    return df, {**provenance, **facts}


#: The share of a log's prompts clipped at trace.tokens.max_kv_len past which the trace says so as a
#: warning: its prefills then mostly share one shape.
CLIP_WARN_SHARE = 0.5


def _where(path: Path | None) -> str:
    return "synthetic request log" if path is None else str(path)


def served_requests(
    cfg: dict[str, Any], part: dict[str, Any], base_dir: str | Path
) -> tuple[Path | None, Requests, dict[str, Any] | None]:
    """The requests the engine serves for resolved trace settings: (log path or None, requests with
    their prefix-cached tokens and scaled, the prefix cache's facts or None)."""
    path = resolve_source(cfg["source"], base_dir)
    if path is None:
        requests = synthetic_requests(cfg["synthetic"], cfg["seed"])
    else:
        block = cfg["prefix_cache"]["block_tokens"]
        requests = read_request_log(path, cfg["columns"], cfg["arrival_format"], block_tokens=block)
    requests, cache = _prefix_cache(requests, cfg, part)
    return path, scale_tokens(requests, cfg["tokens"]["scale"], cfg["tokens"]["max_kv_len"]), cache


def _clipped(requests: Requests, max_kv_len: int | None) -> int:
    """How many requests' prompts sit at the clip (max_kv_len - 1 tokens after scale_tokens)."""
    return 0 if max_kv_len is None else int(np.count_nonzero(requests.context >= max_kv_len - 1))


def clip_note(extra: dict[str, Any] | None) -> str | None:
    """What the trace's provenance says of prompts clipped at trace.tokens.max_kv_len (None: none
    were), a warning once they are most of the log: a log whose prompts all exceed the interpreter's
    max_kv_len collapses to one prefill shape."""
    extra = extra or {}
    clipped, total = extra.get("tokens_clipped"), extra.get("source_requests")
    if not clipped or not total:
        return None
    tokens = extra.get("settings", {}).get("tokens", {})
    share = clipped / total
    note = (
        f"{clipped:,} of {total:,} requests' prompts ({share:.0%}) reach trace.tokens.max_kv_len "
        f"({tokens.get('max_kv_len')}) after trace.tokens.scale ({tokens.get('scale')}) and are clipped to "
        f"{tokens.get('max_kv_len', 1) - 1} tokens"
    )
    if share < CLIP_WARN_SHARE:
        return note
    return (
        f"warning: {note}: their prefills share one shape; scale the log down further (trace.tokens.scale, "
        "in a study's smoke: overlay for the interpreter: docs/traces.md) or raise max_kv_len"
    )


def is_serving(cfg: dict[str, Any]) -> bool:
    """Whether the trace models serving and so carries SERVING_COLUMNS: a prefix cache
    (columns.hash_ids), chunked prefill (batching.max_batched_tokens) or per_sequence decodes."""
    bat = cfg["batching"]
    return bool(
        cfg["columns"]["hash_ids"]
        and cfg["source"] != "synthetic"
        or bat["max_batched_tokens"] is not None
        or bat["kv_summary"] == "per_sequence"
    )


def _window_ns(cfg: dict[str, Any]) -> tuple[int, int | None]:
    win = cfg["window"]
    start_ns = round(win["start_s"] * NS_PER_S)
    return start_ns, None if win["duration_s"] is None else start_ns + round(win["duration_s"] * NS_PER_S)


def _prefix_cache(
    requests: Requests, cfg: dict[str, Any], part: dict[str, Any]
) -> tuple[Requests, dict[str, Any] | None]:
    """The requests with their prefix-cached tokens (headroom.trace.prefix_cache) and the cache's
    facts for the provenance: capacity, and the hit rate of the requests arriving in the window
    beside an unbounded cache's (there and over the whole log). (requests, None) without hash_ids."""
    if requests.blocks is None:
        return requests, None
    pc = cfg["prefix_cache"]
    capacity = prefix_cache.capacity_blocks(pc, part)
    args = (requests.blocks, requests.block_start, requests.context, pc["block_tokens"])
    cached, unbounded = prefix_cache.cached_tokens(*args, capacity), prefix_cache.cached_tokens(*args, None)
    start_ns, end_ns = _window_ns(cfg)
    arrival = requests.arrival_ns
    win = (arrival >= start_ns) & (arrival < end_ns if end_ns is not None else True)
    context = requests.context
    facts = {
        "block_tokens": pc["block_tokens"],
        "capacity_blocks": capacity,
        "capacity_derived": pc["capacity_blocks"] is None,
        "window_requests": int(np.count_nonzero(win)),
        "hit_rate": prefix_cache.hit_rate(cached[win], context[win]),
        "unbounded_hit_rate": prefix_cache.hit_rate(unbounded[win], context[win]),
        "log_unbounded_hit_rate": prefix_cache.hit_rate(unbounded, context),
    }
    return dataclasses.replace(requests, cached=cached), facts


def _window(
    requests: Requests, cfg: dict[str, Any], where: str, *, kv_lens: bool | None = None
) -> tuple[Any, np.ndarray]:
    """The engine's invocation stream and the indices of those in `trace.window` (ValueError naming
    the source when the window holds none, or fewer than `trace.invocations`). kv_lens: keep every
    decode's per-sequence kv_len (default: as trace.batching.kv_summary says)."""
    win, bat = cfg["window"], cfg["batching"]
    start_ns, end_ns = _window_ns(cfg)
    stream = simulate(
        requests,
        max_batch=bat["max_batch"],
        decode_step_ns=round(bat["decode_step_s"] * NS_PER_S),
        end_ns=end_ns,
        max_batched_tokens=bat["max_batched_tokens"],
        kv_lens=bat["kv_summary"] == "per_sequence" if kv_lens is None else kv_lens,
    )
    in_window = np.flatnonzero(stream.time_ns >= start_ns)
    if win["max_invocations"] is not None:
        in_window = in_window[: win["max_invocations"]]
    if in_window.size == 0:
        span_s = requests.arrival_ns[-1] / NS_PER_S
        raise ValueError(
            f"{where}: trace.window (start_s={win['start_s']}, duration_s={win['duration_s']}) holds no "
            f"invocation; column '{cfg['columns']['arrival']}' spans 0..{span_s:.3f} s after row 1's arrival "
            f"(rows 1..{len(requests)})"
        )
    if cfg["invocations"] is not None and in_window.size < cfg["invocations"]:
        raise ValueError(
            f"{where}: trace.window holds {in_window.size} invocations, fewer than trace.invocations = "
            f"{cfg['invocations']}; widen the window or lower the count"
        )
    return stream, in_window


def _invocations(
    sel: Any, picked: np.ndarray, requests: Requests, cfg: dict[str, Any], part: dict[str, Any]
) -> pd.DataFrame:
    """The trace's rows (contracts.TRACE) for the selected invocations of the stream."""
    is_prefill = sel.phase == PREFILL
    summary = cfg["batching"]["kv_summary"]
    kv_raw = (sel.kv_mean if summary == "mean" else sel.kv_max).astype(np.float64)
    kv_len = round_up(kv_raw, cfg["round_to"])
    # prefill: q_len = the new tokens (the context less its cached prefix), kv_len = the context
    q_raw = sel.kv_max if sel.q_len is None else sel.q_len
    q_len = np.where(is_prefill, round_up(q_raw, cfg["round_to"]), 1)
    phase = np.where(is_prefill, "prefill", "decode")
    kv_summary = np.where(is_prefill, "exact", summary)
    n = len(sel)
    heads = (part["heads_q"], part["heads_kv"], part["head_dim"], part["dtype"])
    kv_mean = round_up(sel.kv_mean, cfg["round_to"])  # (only per_sequence keys name it)
    keys = zip(phase, sel.batch, q_len, kv_len, kv_summary, kv_mean, strict=True)
    return pd.DataFrame(
        {
            "invocation": np.arange(n, dtype=np.int64),
            "phase": phase,
            "batch": sel.batch.astype(np.int64),
            "q_len": q_len,
            "kv_len": kv_len,
            "heads_q": np.full(n, part["heads_q"], np.int64),
            "heads_kv": np.full(n, part["heads_kv"], np.int64),
            "head_dim": np.full(n, part["head_dim"], np.int64),
            "dtype": [part["dtype"]] * n,
            "shape_key": [
                shape_key(ph, int(b), int(q), int(kv), *heads, s, int(m)) for ph, b, q, kv, s, m in keys
            ],
            "arrival_s": sel.time_ns / NS_PER_S,
            "kv_summary": kv_summary,
            "kv_len_raw": kv_raw,
            # The log row (1-based) a prefill comes from; -1 for a decode batch.
            "request": np.where(is_prefill, requests.row[np.maximum(sel.request, 0)], -1).astype(np.int64),
            "source_invocation": picked.astype(np.int64),
        }
    )


def _serving_columns(df: pd.DataFrame, stream: Any, picked: np.ndarray, cfg: dict[str, Any]) -> pd.DataFrame:
    """SERVING_COLUMNS: the engine step, the prefill's tokens already in the KV cache (kv_len -
    q_len: prefix-cache hits and earlier chunks) and, for per_sequence decodes, every sequence's
    kv_len rounded up like kv_len (so kv_len = max(kv_lens)); null elsewhere."""
    sel = stream.take(picked)
    per_sequence = cfg["batching"]["kv_summary"] == "per_sequence"
    step_ns = round(cfg["batching"]["decode_step_s"] * NS_PER_S)
    lens = [
        round_up(sel.kv_lens(i, step_ns), cfg["round_to"]).astype(np.int32)
        if per_sequence and sel.phase[i] == DECODE
        else None
        for i in range(len(sel))
    ]
    is_prefill = df["phase"].to_numpy() == "prefill"
    out = df.copy()
    out["step"] = np.asarray(STEPS, dtype=object)[sel.step]
    out["cached_tokens"] = np.where(is_prefill, df["kv_len"] - df["q_len"], 0).astype(np.int64)
    out["kv_lens"] = pd.Series(lens, index=df.index, dtype=object)
    return out


# -- describe -------------------------------------------------------------------------------------


def _quantiles(values: pd.Series) -> dict[str, float]:
    if values.empty:
        return {}
    q = values.quantile([0.0, 0.1, 0.5, 0.9, 1.0]).to_numpy()
    return {
        "min": float(q[0]),
        "p10": float(q[1]),
        "p50": float(q[2]),
        "p90": float(q[3]),
        "max": float(q[4]),
    }


def describe(
    trace_df: pd.DataFrame, train_fraction: float | None = None, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The invocation mix: phase shares, q_len/kv_len/batch distributions per phase, distinct
    shape keys and, given train_fraction, the chronological split the policies stage uses
    (train = the first floor(n * train_fraction) invocations) with the share of test shape keys
    the train part never saw; for a serving trace, `serving` (headroom.trace.serving.describe, with
    the facts `extra` of the trace's provenance holds)."""
    missing = [
        c for c in ("invocation", "phase", "batch", "q_len", "kv_len", "shape_key") if c not in trace_df
    ]
    if missing:
        raise ValueError(f"trace_df: missing column {missing[0]!r}")
    if len(trace_df) == 0:
        raise ValueError("trace_df: the trace has no invocations")
    df = trace_df.sort_values("invocation")
    n = len(df)
    phases = {}
    for phase in ("prefill", "decode"):
        part = df[df["phase"] == phase]
        phases[phase] = {
            "invocations": len(part),
            "share": len(part) / n,
            "distinct_shape_keys": part["shape_key"].nunique(),
            "q_len": _quantiles(part["q_len"]),
            "kv_len": _quantiles(part["kv_len"]),
            "batch": _quantiles(part["batch"]),
            "batch_counts": {int(k): int(v) for k, v in part["batch"].value_counts().sort_index().items()},
        }
    out = {
        "invocations": n,
        "duration_s": float(df["arrival_s"].iloc[-1] - df["arrival_s"].iloc[0])
        if "arrival_s" in df
        else None,
        "phases": phases,
        "distinct_shape_keys": df["shape_key"].nunique(),
        "top_shape_keys": {str(k): int(v) for k, v in df["shape_key"].value_counts().head(10).items()},
        "split": None,
        "serving": serving.describe(df, extra),
        "kinds": _kinds(df, train_fraction),
    }
    if train_fraction is not None:
        if not 0 < train_fraction < 1:
            raise ValueError(f"train_fraction: {train_fraction!r} must lie strictly between 0 and 1")
        n_train = math.floor(n * train_fraction)
        train, test = df.iloc[:n_train], df.iloc[n_train:]
        test_keys = set(test["shape_key"])
        unseen = test_keys - set(train["shape_key"])
        out["split"] = {
            "train_fraction": train_fraction,
            "train_invocations": len(train),
            "test_invocations": len(test),
            "test_keys": len(test_keys),
            "unseen_test_keys": len(unseen),
            "unseen_test_key_share": len(unseen) / len(test_keys) if test_keys else 0.0,
            "unseen_test_invocation_share": float(test["shape_key"].isin(unseen).mean())
            if len(test)
            else 0.0,
        }
    return out


def _kinds(df: pd.DataFrame, train_fraction: float | None) -> dict[str, dict[str, float]]:
    """Per step kind (a deployment-profile part): the window's invocations it stands for (the sum of
    its weights), those sampled, their weight and, given train_fraction, how many its own split tests."""
    step = df["step"].map(STEP_KIND) if "step" in df else pd.Series(np.nan, index=df.index)
    kinds = step.fillna(df["phase"].map(STEP_KIND_OF_PHASE))
    weight = df[WEIGHT] if WEIGHT in df else pd.Series(1.0, index=df.index)
    out = {}
    for kind, rows in df.groupby(kinds.to_numpy(), sort=True):
        n = len(rows)
        out[str(kind)] = {
            "window": float(weight[rows.index].sum()),
            "sampled": n,
            "weight": float(weight[rows.index].mean()),
            "test": None if train_fraction is None else n - math.floor(n * train_fraction),
        }
    return out


def _p50_range(q: dict[str, float]) -> str:
    return f"{q['p50']:g} [{q['min']:g}..{q['max']:g}]"


def describe_text(
    trace_df: pd.DataFrame, train_fraction: float | None = None, extra: dict[str, Any] | None = None
) -> str:
    """describe() as plain text (what `headroom trace describe` prints)."""
    d = describe(trace_df, train_fraction, extra)
    span = "" if d["duration_s"] is None else f" over {d['duration_s']:.3f} s"
    lines = [
        f"invocations: {d['invocations']}{span}; distinct shape keys: {d['distinct_shape_keys']}",
        "",
        f"{'phase':<8} {'count':>6} {'share':>6} {'keys':>5}  {'q_len p50 [min..max]':<22} "
        f"{'kv_len p50 [min..max]':<24} batch p50 [min..max]",
    ]
    for phase, p in d["phases"].items():
        row = f"{phase:<8} {p['invocations']:>6} {p['share']:>6.1%} {p['distinct_shape_keys']:>5}"
        if p["invocations"]:
            row += f"  {_p50_range(p['q_len']):<22} {_p50_range(p['kv_len']):<24} {_p50_range(p['batch'])}"
        lines.append(row)
    lines += ["", f"{'step kind':<12} {'window':>8} {'sampled':>8} {'weight':>8} {'tested':>7}"]
    for kind, k in d["kinds"].items():
        tested = "" if k["test"] is None else f"{k['test']:>7}"
        lines.append(f"{kind:<12} {k['window']:>8.0f} {k['sampled']:>8} {k['weight']:>8.2f} {tested}")
    batches = d["phases"]["decode"]["batch_counts"]
    if batches:
        lines += ["", "decode batch sizes: " + ", ".join(f"{b}: {c}" for b, c in batches.items())]
    split = d["split"]
    if split:
        lines += [
            "",
            f"chronological split at train_fraction {split['train_fraction']:g}: "
            f"{split['train_invocations']} train, {split['test_invocations']} test invocations",
            f"test shape keys unseen in train: {split['unseen_test_keys']} of {split['test_keys']} "
            f"({split['unseen_test_key_share']:.1%} of keys, "
            f"{split['unseen_test_invocation_share']:.1%} of test invocations)",
        ]
    lines += serving.text(d["serving"])
    note = clip_note(extra)
    lines += ["", note] if note else []
    lines += ["", "most frequent shape keys:"]
    lines += [f"  {c:>6}  {k}" for k, c in d["top_shape_keys"].items()]
    return "\n".join(lines) + "\n"
