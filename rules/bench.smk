import os


# Kernel benchmark against torch SDPA (BENCHMARKS.md); GPU only, not part of `all`:
#   snakemake --cores 1 --resources gpu=1 kernel_bench
rule kernel_bench:
    input:
        code=src("scripts/bench_kernels.py", *KERNEL_CODE),
    output:
        table=f"{R}/kernel_bench/bench.md",
        rows=f"{R}/kernel_bench/bench.json",
    log:
        f"{R}/logs/kernel_bench.log",
    conda:
        "../envs/gpu.yaml"
    resources:
        gpu=1,
    params:
        out_dir=lambda wildcards, output: os.path.dirname(output.table),
    shell:
        "PYTHONUNBUFFERED=1 python3 scripts/bench_kernels.py --out {params.out_dir} --tiles config "
        "--table-variant > {log} 2>&1"
