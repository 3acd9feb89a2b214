import os


# Kernel benchmark against torch SDPA (BENCHMARKS.md); GPU only, not part of `all`:
#   snakemake --cores 1 --resources gpu=1 results/default/kernel_bench/bench.md
rule kernel_bench:
    input:
        code=src("tools/bench.py", *KERNEL_CODE),
    output:
        table=f"{S}/kernel_bench/bench.md",
        rows=f"{S}/kernel_bench/bench.json",
    log:
        f"{S}/logs/kernel_bench.log",
    wildcard_constraints:
        study=one_of(MEASURED_STUDIES),
    conda:
        "../envs/gpu.yaml"
    threads: 1
    resources:
        **GPU_RESOURCES,
        mem_mb=8000,
        runtime=30,
    params:
        out_dir=lambda wildcards, output: os.path.dirname(output.table),
    shell:
        "PYTHONUNBUFFERED=1 python3 tools/bench.py --out {params.out_dir} --generations 1 2 "
        "--tiles config --table-variant > {log} 2>&1"
