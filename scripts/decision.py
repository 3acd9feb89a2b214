from pathlib import Path

from headroom.core import defaults, settings
from headroom.core.stage import run_stage


def main(stage):
    from headroom.decide import decision, figures

    options = settings.merge("policies", defaults.section("policies"), stage.params["policies"])
    figs = figures.study_figures(
        stage.read("trace"),
        stage.read_all("portfolio"),
        stage.read("lifecycle"),
        train_fraction=options.pop("train_fraction"),
        seed=options.pop("seed"),
        deployment=stage.params["decision"].get("deployment"),
        **options,
    )
    verdict = decision.decide(
        figs,
        stage.read("graph_sweep"),
        stage.read("environment"),
        confidence=float(options["confidence"]),
        **stage.params["decision"],
    )
    stage.log.info("verdict %s: %s", verdict["verdict"].iloc[0], verdict["reason"].iloc[0])
    if (verdict["device"] == "cuda").all():  # a decision on GPU measurements: what could it detect?
        from headroom.decide import power

        study_dir = Path(stage.input_path("trace")).parent  # its inputs, verified just above
        modes = [m for m in verdict["mode"].unique() if "@" not in m]  # per mode, not profile parts
        power = {m: power.detectable_effect(study_dir, m) for m in modes}
        for m, v in power.items():
            stage.log.info("%s: %s", m, v["text"])
        verdict = decision.with_detectable_effects(verdict, power)
    stage.write("decision", verdict)


run_stage(snakemake, main)
