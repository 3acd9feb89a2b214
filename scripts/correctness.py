"""Rule `correctness`: every candidate on every distinct trace shape vs the float64 reference."""

from headroom.core.stage import run_stage
from headroom.measure import device


def main(stage):
    # imported here, after run_stage has set TRITON_INTERPRET for the resolved device
    from headroom.core import defaults
    from headroom.measure import correctness

    p = stage.params
    section = p["correctness"]
    result = correctness.check(
        stage.read("candidates"),
        correctness.shapes(stage.read("trace")),
        device=stage.device,
        tolerances_by_dtype=correctness.tolerances(section),
        seed=int(section.get("seed", defaults.value("correctness", "seed"))),
        rope_base=float(p["rope_base"]),
        inject_fault=section.get("inject_fault"),
        log=stage.log,
    )
    correctness.gate(result, p["on_correctness_failure"], stage.log)
    stage.write("correctness", result)


run_stage(snakemake, main, device=device)  # noqa: F821 (injected by Snakemake)
