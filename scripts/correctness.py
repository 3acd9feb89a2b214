"""Rule `correctness`: every candidate on every distinct trace shape vs the float64 reference."""

from headroom.core.stage import run_stage
from headroom.measure import device


def main(stage):
    # imported here, after run_stage has set TRITON_INTERPRET for the resolved device
    from headroom.core import defaults
    from headroom.families import check as family_check
    from headroom.families import stages
    from headroom.families.attention import correctness as attention
    from headroom.measure import correctness

    p = stage.params
    section = p["correctness"]
    seed = int(section.get("seed", defaults.value("correctness", "seed")))
    family = stages.loaded(stage)
    if family is not None:  # a kernel family against its own float64 reference (docs/families.md)
        if section.get("inject_fault"):
            raise ValueError(
                "correctness.inject_fault is the attention gate's test hook: unset it for a family"
            )
        result = family_check.gate_table(
            family_check.check(family.family, stage.read("trace"), device=stage.device, seed=seed)
        )
        correctness.gate(result, p["on_correctness_failure"], stage.log)
        if not result.groupby("candidate")["passed"].all().any():
            raise ValueError(f"family {family.family.name!r}: no candidate passed correctness on every shape")
        stage.write("correctness", result)
        return
    trace, candidates = stage.read("trace"), stage.read("candidates")
    if stage.device == "cuda":
        workers = section.get("compile_workers", defaults.value("correctness", "compile_workers"))
        attention.compile_ahead(
            trace, candidates, workers=workers, rope_base=float(p["rope_base"]), log=stage.log
        )
    result = attention.check(
        candidates,
        attention.shapes(trace),
        device=stage.device,
        tolerances_by_dtype=correctness.tolerances(section),
        seed=seed,
        rope_base=float(p["rope_base"]),
        inject_fault=section.get("inject_fault"),
        log=stage.log,
    )
    correctness.gate(result, p["on_correctness_failure"], stage.log)
    stage.write("correctness", result)


run_stage(snakemake, main, device=device)  # noqa: F821 (injected by Snakemake)
