# Analysis: turns measurement artifacts into the answer, on any machine (replay included): policies
# on chronological splits and the policy x fusion factorial, the roofline model, the decision rule and
# the report. Every rule here reads results/<study>/*.parquet only; no GPU.
PORTFOLIO_RUNS = per_run(f"{S}/portfolio/run-{{run}}.parquet")
PORTFOLIO_SAMPLES = per_run(f"{S}/portfolio/run-{{run}}-samples.parquet")


rule policies:
    input:
        trace=f"{S}/trace.parquet",
        portfolio=PORTFOLIO_RUNS,
        lifecycle=f"{S}/lifecycle.parquet",
        calibration=f"{S}/calibration.parquet",
        code=src("scripts/policies.py"),
    output:
        **artifact(policy_eval=f"{S}/policy_eval.parquet"),
        **artifact(factorial=f"{S}/factorial.parquet"),
    log:
        f"{S}/logs/policies.log",
    benchmark:
        f"{S}/benchmarks/policies.tsv"
    conda:
        "../envs/analysis.yaml"
    threads: 1
    resources:
        mem_mb=4000,
        runtime=30,
    params:
        policies=cfg("policies"),
        # the decoder-layer model that says where eager host time is exposed (headroom/families/attention/layer.py)
        recommendation=cfg("recommendation"),
    script:
        "../scripts/policies.py"


rule roofline:
    input:
        trace=f"{S}/trace.parquet",
        candidates=f"{S}/candidates.parquet",
        portfolio=PORTFOLIO_RUNS,
        calibration=f"{S}/calibration.parquet",
        environment=f"{S}/environment.parquet",
        code=src("scripts/roofline.py"),
    output:
        **artifact(roofline=f"{S}/roofline.parquet"),
    log:
        f"{S}/logs/roofline.log",
    benchmark:
        f"{S}/benchmarks/roofline.tsv"
    conda:
        "../envs/analysis.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        # cold (L2-flushed) timings change what is resident, so the model must know
        flush_l2=cfg("portfolio", "flush_l2", default=False),
    script:
        "../scripts/roofline.py"


rule decision:
    input:
        trace=f"{S}/trace.parquet",
        portfolio=PORTFOLIO_RUNS,
        lifecycle=f"{S}/lifecycle.parquet",
        calibration=f"{S}/calibration.parquet",
        graph_sweep=f"{S}/graph_sweep.parquet",
        environment=f"{S}/environment.parquet",
        code=src("scripts/decision.py"),
    output:
        **artifact(decision=f"{S}/decision.parquet"),
    log:
        f"{S}/logs/decision.log",
    benchmark:
        f"{S}/benchmarks/decision.tsv"
    conda:
        "../envs/analysis.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        decision=cfg("decision"),
        # the figures are fitted and scored as in `policies`, so they read its settings
        policies=cfg("policies"),
        recommendation=cfg("recommendation"),
    script:
        "../scripts/decision.py"


# What the verdict ships: the kernel (or policy) per mode and profile part, what it is worth per
# decoder layer, and the dispatch table a server loads (headroom.dispatch).
rule recommendation:
    input:
        decision=f"{S}/decision.parquet",
        trace=f"{S}/trace.parquet",
        portfolio=PORTFOLIO_RUNS,
        lifecycle=f"{S}/lifecycle.parquet",
        candidates=f"{S}/candidates.parquet",
        calibration=f"{S}/calibration.parquet",
        environment=f"{S}/environment.parquet",
        # the kernel source hash of dispatch.json covers what builds the plan a server runs
        code=src("scripts/recommendation.py", *hdispatch.deploy_sources()),
    output:
        **artifact(recommendation=f"{S}/recommendation.parquet"),
        dispatch=f"{S}/dispatch.json",
        dispatch_blake3=f"{S}/dispatch.json.blake3",
    log:
        f"{S}/logs/recommendation.log",
    benchmark:
        f"{S}/benchmarks/recommendation.tsv"
    conda:
        "../envs/analysis.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        decision=cfg("decision"),
        policies=cfg("policies"),
        recommendation=cfg("recommendation"),
    script:
        "../scripts/recommendation.py"


rule report:
    input:
        decision=f"{S}/decision.parquet",
        recommendation=f"{S}/recommendation.parquet",
        environment=f"{S}/environment.parquet",
        trace=f"{S}/trace.parquet",
        candidates=f"{S}/candidates.parquet",
        correctness=f"{S}/correctness.parquet",
        portfolio=PORTFOLIO_RUNS,
        samples=PORTFOLIO_SAMPLES,
        lifecycle=f"{S}/lifecycle.parquet",
        graph_sweep=f"{S}/graph_sweep.parquet",
        calibration=f"{S}/calibration.parquet",
        policy_eval=f"{S}/policy_eval.parquet",
        factorial=f"{S}/factorial.parquet",
        roofline=f"{S}/roofline.parquet",
        code=src(
            "scripts/report.py",
            *sorted(glob.glob("headroom/report/templates/*")),
        ),
    output:
        html=report(f"{S}/report/index.html", caption="captions/report_html.rst", category="Report"),
        md=report(f"{S}/report/report.md", caption="captions/report_md.rst", category="Report"),
        # the pages' BLAKE3 sidecars, so a deleted one is written again by a plain run
        html_blake3=f"{S}/report/index.html.blake3",
        md_blake3=f"{S}/report/report.md.blake3",
        figures=report(
            directory(f"{S}/report/figures"),
            patterns=["{name}.png"],
            caption="captions/figures.rst",
            category="Figures",
        ),
    log:
        f"{S}/logs/report.log",
    benchmark:
        f"{S}/benchmarks/report.tsv"
    conda:
        "../envs/analysis.yaml"
    threads: 1
    resources:
        mem_mb=4000,
        runtime=10,
    params:
        report=cfg("report"),
        benchmarks=measured_benchmarks,
    script:
        "../scripts/report.py"
