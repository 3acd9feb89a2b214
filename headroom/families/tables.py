"""Per-M config tables as serving stacks ship them (vLLM's and SGLang's fused-MoE JSON files): a JSON
object from a token count M (a string of an int) to a Triton config (``CONFIG_KEYS``), looked up at run
time by the nearest M (``ConfigTable.choose``: vLLM's rule, ties to the smaller M).

``from_config_table`` reads such a file strictly (one-line ValueError naming the file and what is
wrong); ``write_config_table`` writes one in the ecosystem's format. A family that has a table gives it
as its optional member ``config_table``: the study scores it as the policy ``config-table``
(headroom.core.names.CONFIG_TABLE) beside the policies fitted on the trace, and its record
(``ConfigTable.to_record``) enters the family's provenance.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from headroom.policies.shapes import nearest

#: A config's keys, in the ecosystem's order (kernels/moe.py's CONFIG_KEYS: the same tuple).
CONFIG_KEYS = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages")


def _config_problem(config: Any) -> str | None:
    """What is wrong with ``config`` as a table's value (None: nothing)."""
    if not isinstance(config, Mapping):
        return f"must be an object with keys {', '.join(CONFIG_KEYS)}, got {type(config).__name__}"
    missing = [k for k in CONFIG_KEYS if k not in config]
    unknown = sorted(str(k) for k in config if k not in CONFIG_KEYS)
    if missing or unknown:
        return f"keys must be exactly {', '.join(CONFIG_KEYS)} (missing {missing}, unknown {unknown})"
    bad = [k for k in CONFIG_KEYS if type(config[k]) is not int or config[k] < 1]
    if bad:
        return f"{bad[0]} must be a positive int, got {config[bad[0]]!r}"
    return None


def _ordered(config: Mapping) -> dict[str, int]:
    return {k: int(config[k]) for k in CONFIG_KEYS}


def config_id(config: Mapping) -> str:
    """The candidate id of a config: ``m{BM}-n{BN}-k{BK}-g{G}-w{warps}-s{stages}``."""
    problem = _config_problem(config)
    if problem:
        raise ValueError(f"config: {problem}")
    bm, bn, bk, g, w, s = (config[k] for k in CONFIG_KEYS)
    return f"m{bm}-n{bn}-k{bk}-g{g}-w{w}-s{s}"


@dataclass(frozen=True, kw_only=True)
class ConfigTable:
    """A per-M config table: ``entries`` (M ascending, candidate id) keyed on the int shape feature
    ``feature``; ``configs`` (candidate id, config) of every distinct config it names, in the order
    its entries first name them; ``source`` the path it was read from, as given; ``blake3`` the BLAKE3
    of the file's bytes."""

    feature: str = "tokens"
    entries: tuple[tuple[int, str], ...]
    configs: tuple[tuple[str, dict], ...]
    source: str = ""
    blake3: str = ""

    def choose(self, m: int) -> str:
        """The candidate id a server runs for ``m``: the nearest key's (ties to the smaller key)."""
        return dict(self.entries)[nearest([k for k, _ in self.entries], m)]

    def to_record(self) -> dict:
        """The table as plain JSON (``from_record`` reads it back)."""
        return {
            "feature": self.feature,
            "entries": [[m, c] for m, c in self.entries],
            "configs": [[c, dict(config)] for c, config in self.configs],
            "source": self.source,
            "blake3": self.blake3,
        }

    @classmethod
    def from_record(cls, record: Mapping) -> ConfigTable:
        configs = tuple((str(c), _ordered(config)) for c, config in record["configs"])
        entries = tuple((int(m), str(c)) for m, c in record["entries"])
        unnamed = sorted({c for _, c in entries} - {c for c, _ in configs})
        if unnamed:
            raise ValueError(f"config table record: entries name configs it lacks: {', '.join(unnamed)}")
        return cls(feature=str(record["feature"]), entries=entries, configs=configs,
                   source=str(record.get("source", "")), blake3=str(record.get("blake3", "")))  # fmt: skip


class _Repeated(ValueError):
    """A JSON object whose key repeats (json keeps the last silently; a table must not)."""


def _no_repeats(pairs: list) -> dict:
    keys = [k for k, _ in pairs]
    dup = next((k for k in keys if keys.count(k) > 1), None)
    if dup is not None:
        raise _Repeated(f"key {dup!r} repeats")
    return dict(pairs)


def _read(path: str | os.PathLike) -> tuple[bytes, Any]:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ValueError(
            f"config table {path}: cannot read it ({exc.strerror or type(exc).__name__})"
        ) from None
    try:
        return data, json.loads(data, object_pairs_hook=_no_repeats)
    except _Repeated as exc:
        raise ValueError(f"config table {path}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"config table {path}: not valid JSON ({exc.msg}, line {exc.lineno})") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"config table {path}: not valid JSON ({str(exc).splitlines()[0]})") from None


def from_config_table(path: str | os.PathLike, *, feature: str = "tokens") -> ConfigTable:
    """The config table in the JSON file at ``path`` (keys: M, values: configs of ``CONFIG_KEYS``),
    keyed on the shape feature ``feature``; ValueError (one line, naming the file) for a file that is
    not exactly that."""
    import blake3

    data, table = _read(path)
    if not isinstance(table, dict):
        raise ValueError(
            f"config table {path}: must be a JSON object of M -> config, got {type(table).__name__}"
        )
    if not table:
        raise ValueError(f"config table {path}: holds no entry")
    entries, configs = [], {}
    for key, config in table.items():
        if not (key.isascii() and key.isdigit() and key == str(int(key)) and int(key) >= 1):
            raise ValueError(f"config table {path}: key {key!r} is not a positive int (a token count M)")
        problem = _config_problem(config)
        if problem:
            raise ValueError(f"config table {path}: M={key}: {problem}")
        cid = config_id(config)
        configs.setdefault(cid, _ordered(config))
        entries.append((int(key), cid))
    entries.sort()
    ordered = tuple((c, configs[c]) for c in dict.fromkeys(c for _, c in entries))
    return ConfigTable(feature=feature, entries=tuple(entries), configs=ordered, source=str(path),
                       blake3=blake3.blake3(data).hexdigest())  # fmt: skip


def write_config_table(path: str | os.PathLike, table: Mapping[int, Mapping]) -> None:
    """Write ``table`` (M -> config) at ``path`` in the ecosystem's format: keys ascending as strings,
    each config's keys in ``CONFIG_KEYS`` order, indented by 4, a trailing newline; atomically (a
    temporary file in the same folder, then renamed over ``path``)."""
    if not table:
        raise ValueError(f"config table {path}: holds no entry")
    out = {}
    for m in sorted(table):
        if type(m) is not int or m < 1:
            raise ValueError(f"config table {path}: key {m!r} is not a positive int (a token count M)")
        problem = _config_problem(table[m])
        if problem:
            raise ValueError(f"config table {path}: M={m}: {problem}")
        out[str(m)] = _ordered(table[m])
    target = Path(path)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(out, indent=4) + "\n")
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
