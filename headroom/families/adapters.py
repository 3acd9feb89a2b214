"""Families from what users already have: a dict of callables, or a `@triton.autotune` kernel whose
configs become the candidates (docs/families.md)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from headroom.families.contract import Candidate, FamilyError, Feature

_ID_CHARS = re.compile(r"[^A-Za-z0-9_.+-]")


class _Declared:
    """The members every adapter takes as given: name, version, features and the shape, input,
    reference, tolerance and cost functions."""

    def __init__(self, *, name, version, features, shapes, inputs, reference, tolerance, cost, supports=None):
        self.name, self.version = name, version
        self.features: dict[str, Feature] = dict(features)
        self._shapes, self._inputs, self._reference = shapes, inputs, reference
        self._tolerance, self._cost, self._supports = tolerance, cost, supports

    def shapes(self, step):
        return self._shapes(step)

    def supports(self, candidate, shape) -> bool:
        return True if self._supports is None else self._supports(candidate, shape)

    def inputs(self, shape, *, seed: int, device: str):
        return self._inputs(shape, seed=seed, device=device)

    def reference(self, shape, inputs):
        return self._reference(shape, inputs)

    def tolerance(self, dtype):
        return self._tolerance(dtype)

    def cost(self, shape) -> dict:
        return self._cost(shape)


class CallablesFamily(_Declared):
    """A family whose candidates are plain functions fn(inputs) -> output (nothing to compile)."""

    def __init__(self, fns: Mapping[str, Callable], **declared):
        if not isinstance(fns, Mapping) or not fns:
            raise FamilyError(f"from_callables({declared.get('name')!r}): give at least one {{id: fn}}")
        bad = [k for k, fn in fns.items() if not callable(fn)]
        if bad:
            raise FamilyError(
                f"from_callables({declared.get('name')!r}): {', '.join(map(str, bad))} not callable"
            )
        super().__init__(**declared)
        self._fns = dict(fns)
        self._candidates = [Candidate(str(k)) for k in fns]

    def candidates(self) -> list[Candidate]:
        return list(self._candidates)

    def prepare(self, candidate, shape, inputs):
        return self._fns[candidate.id]


def from_callables(fns: Mapping[str, Callable], *, name, version, features, shapes, inputs, reference,
                   tolerance, cost, supports=None) -> CallablesFamily:  # fmt: skip
    """A family of {id: fn(inputs) -> output}; `supports(candidate, shape)` optional (default True)."""
    return CallablesFamily(fns, name=name, version=version, features=features, shapes=shapes, inputs=inputs,
                           reference=reference, tolerance=tolerance, cost=cost, supports=supports)  # fmt: skip


def config_id(config: Any) -> str:
    """A Triton config's candidate id: its kwargs in order, then warps and stages (and ctas, maxnreg
    where set): `BLOCK_M64-BLOCK_N32-w4-s2`."""
    parts = [f"{k}{v}" for k, v in config.kwargs.items()]
    parts += [f"w{config.num_warps}", f"s{config.num_stages}"]
    if getattr(config, "num_ctas", 1) not in (None, 1):
        parts.append(f"c{config.num_ctas}")
    if getattr(config, "maxnreg", None) is not None:
        parts.append(f"r{config.maxnreg}")
    return _ID_CHARS.sub("_", "-".join(parts))[:120]


class TritonAutotuneFamily(_Declared):
    """A family whose candidates are a `@triton.autotune` kernel's configs, each launched as
    `kernel.fn[grid](*args, **kwargs, **config.all_kwargs())` (Triton's exact-key cache bypassed),
    around the launch the config's pre_hook and the autotuner's reset_to_zero/restore_value hooks,
    as the autotuner runs them when it benchmarks a config."""

    def __init__(self, kernel: Any, *, args: Callable, output: str | Callable = "out", **declared):
        if not hasattr(kernel, "configs") or not hasattr(kernel, "fn"):
            raise FamilyError(
                f"from_triton_autotune({declared.get('name')!r}): {kernel!r:.80} is not a @triton.autotune kernel "
                "(no .configs / .fn)"
            )
        super().__init__(**declared)
        self.kernel, self._args, self._output = kernel, args, output
        self._configs: dict[str, Any] = {}
        for i, config in enumerate(kernel.configs):
            cid = config_id(config)
            self._configs[cid if cid not in self._configs else f"{cid}-{i}"] = config

    def candidates(self) -> list[Candidate]:
        return [Candidate(cid, _scalars(c.all_kwargs())) for cid, c in self._configs.items()]

    def output(self, shape, inputs):
        if callable(self._output):
            return self._output(shape, inputs)
        if isinstance(inputs, Mapping) and self._output in inputs:
            return inputs[self._output]
        if hasattr(inputs, self._output):
            return getattr(inputs, self._output)
        raise FamilyError(
            f"family {self.name!r}: the inputs hold no {self._output!r}: pass output=<key> or output=fn(shape, inputs) "
            "to from_triton_autotune"
        )

    def prepare(self, candidate, shape, inputs):
        config = self._configs[candidate.id]
        grid, args, kwargs = self._args(shape, inputs)
        meta = config.all_kwargs()
        launch = self.kernel.fn[grid]
        nargs = {**dict(zip(self.kernel.arg_names, args, strict=False)), **kwargs, **meta}
        out = self.output(shape, inputs)
        before, after = self.kernel.pre_hook, self.kernel.post_hook

        def fn(_inputs):
            if config.pre_hook is not None:
                config.pre_hook(nargs)
            before(nargs)
            launch(*args, **kwargs, **meta)
            after(nargs, exception=None)
            return out

        return fn


def from_triton_autotune(kernel, *, name, version, features, shapes, inputs, args, reference, tolerance, cost,
                         output="out", supports=None) -> TritonAutotuneFamily:  # fmt: skip
    """A family of a `@triton.autotune` kernel's configs. `args(shape, inputs) -> (grid, args, kwargs)`
    (called in `prepare`, untimed); `output`: the key (or attribute) of the inputs the kernel writes,
    or output(shape, inputs); `supports(candidate, shape)` optional (default True)."""
    return TritonAutotuneFamily(kernel, args=args, output=output, name=name, version=version, features=features,
                                shapes=shapes, inputs=inputs, reference=reference, tolerance=tolerance, cost=cost,
                                supports=supports)  # fmt: skip


def _scalars(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in kwargs.items() if v is None or isinstance(v, str | bool | int | float)}
