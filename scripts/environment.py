import pandas as pd

from headroom.core.stage import run_stage
from headroom.measure import device
from headroom.measure.environment import describe


def main(stage):
    warm = stage.params.get("flashinfer")
    jit_s = None
    if warm:  # FlashInfer's JIT modules built once per environment, before the cache is described
        from headroom.families.attention import flashinfer

        part = warm["partition"]
        jit_s = flashinfer.warm(part, list(warm["backends"]), float(part["rope_base"]))
        stage.log.info("FlashInfer JIT modules for %s ready in %.1f s", ", ".join(warm["backends"]), jit_s)
    row = describe(stage.device)
    if jit_s is not None:
        row["flashinfer_jit_s"] = jit_s
    stage.log.info("environment: %s", row)
    stage.write("environment", pd.DataFrame([row]))


run_stage(snakemake, main, device=device)
