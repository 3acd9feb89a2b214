# Analysis: turns measurement artifacts into the answer, on any machine (replay included): policies
# on chronological splits and the policy x fusion factorial, the roofline model, the decision rule and
# the report. Every rule here reads results/*.parquet only; no GPU.
PORTFOLIO_RUNS = expand(f"{R}/portfolio/run-{{run}}.parquet", run=RUNS)
# the policy registry and the cross-run estimators every analysis rule that scores policies runs
ANALYSIS_CODE = [f"headroom/analysis/{m}.py" for m in ("registry", "costs", "crossrun", "policies")]
# the report's assembly, its model and one module per section
REPORT_CODE = sorted(glob.glob("headroom/report/**/*.py", recursive=True))
PORTFOLIO_SAMPLES = expand(f"{R}/portfolio/run-{{run}}-samples.parquet", run=RUNS)


rule policies:
    input:
        trace=f"{R}/trace.parquet",
        portfolio=PORTFOLIO_RUNS,
        lifecycle=f"{R}/lifecycle.parquet",
        code=src(*ANALYSIS_CODE, "scripts/policies.py"),
    output:
        policy_eval=artifact(f"{R}/policy_eval.parquet"),
        factorial=artifact(f"{R}/factorial.parquet"),
    log:
        f"{R}/logs/policies.log",
    benchmark:
        f"{R}/benchmarks/policies.tsv"
    conda:
        "../envs/analysis.yaml"
    params:
        policies=STUDY["policies"],
    script:
        "../scripts/policies.py"


rule roofline:
    input:
        trace=f"{R}/trace.parquet",
        candidates=f"{R}/candidates.parquet",
        portfolio=PORTFOLIO_RUNS,
        calibration=f"{R}/calibration.parquet",
        environment=f"{R}/environment.parquet",
        code=src("headroom/analysis/roofline.py", "scripts/roofline.py"),
    output:
        roofline=artifact(f"{R}/roofline.parquet"),
    log:
        f"{R}/logs/roofline.log",
    benchmark:
        f"{R}/benchmarks/roofline.tsv"
    conda:
        "../envs/analysis.yaml"
    params:
        # cold (L2-flushed) timings change what is resident, so the model must know
        flush_l2=STUDY["portfolio"].get("flush_l2", False),
    script:
        "../scripts/roofline.py"


rule decision:
    input:
        trace=f"{R}/trace.parquet",
        portfolio=PORTFOLIO_RUNS,
        lifecycle=f"{R}/lifecycle.parquet",
        graph_sweep=f"{R}/graph_sweep.parquet",
        environment=f"{R}/environment.parquet",
        code=src(
            *ANALYSIS_CODE,
            "headroom/analysis/figures.py",
            "headroom/analysis/decision.py",
            "scripts/decision.py",
        ),
    output:
        decision=artifact(f"{R}/decision.parquet"),
    log:
        f"{R}/logs/decision.log",
    benchmark:
        f"{R}/benchmarks/decision.tsv"
    conda:
        "../envs/analysis.yaml"
    params:
        decision=STUDY["decision"],
        # the figures are fitted and scored as in `policies`, so they read its settings
        policies=STUDY["policies"],
    script:
        "../scripts/decision.py"


rule report:
    input:
        decision=f"{R}/decision.parquet",
        environment=f"{R}/environment.parquet",
        trace=f"{R}/trace.parquet",
        candidates=f"{R}/candidates.parquet",
        correctness=f"{R}/correctness.parquet",
        portfolio=PORTFOLIO_RUNS,
        samples=PORTFOLIO_SAMPLES,
        lifecycle=f"{R}/lifecycle.parquet",
        graph_sweep=f"{R}/graph_sweep.parquet",
        calibration=f"{R}/calibration.parquet",
        policy_eval=f"{R}/policy_eval.parquet",
        factorial=f"{R}/factorial.parquet",
        roofline=f"{R}/roofline.parquet",
        code=src(
            *REPORT_CODE,
            "headroom/analysis/decision.py",
            "headroom/analysis/policies.py",
            "headroom/measure/noise.py",
            "headroom/report/templates/report.html.j2",
            "headroom/report/templates/report.md.j2",
            "scripts/report.py",
        ),
    output:
        html=report(f"{R}/report/index.html", caption="captions/report_html.rst", category="Report"),
        md=report(f"{R}/report/report.md", caption="captions/report_md.rst", category="Report"),
        figures=report(
            directory(f"{R}/report/figures"),
            patterns=["{name}.png"],
            caption="captions/figures.rst",
            category="Figures",
        ),
    log:
        f"{R}/logs/report.log",
    benchmark:
        f"{R}/benchmarks/report.tsv"
    conda:
        "../envs/analysis.yaml"
    params:
        report=STUDY["report"],
        # stage wall times of the run that measured: in replay, the recorded run's, not this one's
        benchmarks=f"{REPLAY}/benchmarks" if REPLAY else f"{R}/benchmarks",
    script:
        "../scripts/report.py"
