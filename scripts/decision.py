from headroom.core.stage import run_stage


def main(stage):
    from headroom.analysis import decision, figures

    options = dict(stage.params["policies"])
    figs = figures.study_figures(
        stage.read("trace"),
        stage.read_all("portfolio"),
        stage.read("lifecycle"),
        train_fraction=options.pop("train_fraction"),
        seed=options.pop("seed", 0),
        **options,
    )
    verdict = decision.decide(
        figs,
        stage.read("graph_sweep"),
        stage.read("environment"),
        confidence=float(options.get("confidence", 0.95)),
        **stage.params["decision"],
    )
    stage.log.info("verdict %s: %s", verdict["verdict"].iloc[0], verdict["reason"].iloc[0])
    stage.write("decision", verdict)


run_stage(snakemake, main)
