from headroom.core import defaults, settings
from headroom.core.stage import run_stage


def main(stage):
    from headroom.decide import decision, figures, measured, power
    from headroom.families import stages

    options = settings.merge("policies", defaults.section("policies"), stage.params["policies"])
    train_fraction, seed = options.pop("train_fraction"), options.pop("seed")
    thresholds = {**defaults.section("decision"), **stage.params["decision"]}
    trace, portfolio, lifecycle = stage.read("trace"), stage.read_all("portfolio"), stage.read("lifecycle")
    keying = stages.keying(stage)
    # eager timings carry the host time the GPU does not hide, by the decoder-layer model
    host = {
        "calibration": stage.read("calibration"),
        "intermediate_ratio": float(
            {**defaults.section("recommendation"), **(stage.params["recommendation"] or {})}[
                "intermediate_ratio"
            ]
        ),
    }
    figs = figures.study_figures(
        trace,
        portfolio,
        lifecycle,
        train_fraction=train_fraction,
        seed=seed,
        deployment=thresholds.get("deployment"),
        thresholds=thresholds,
        keying=keying,
        **host,
        **options,
    )
    verdict = decision.decide(
        figs,
        stage.read("graph_sweep"),
        stage.read("environment"),
        confidence=float(options["confidence"]),
        **{k: v for k, v in thresholds.items() if k != "deployment"},
        deployment=thresholds.get("deployment"),
        keying=keying,
    )
    stage.log.info(
        "verdict %s (%s): %s",
        verdict["verdict"].iloc[0],
        verdict["reason_code"].iloc[0],
        verdict["reason"].iloc[0],
    )
    if (verdict["device"] == "cuda").all():  # a decision on GPU measurements: what could it detect?
        opts, costs, modes = measured.checked_modes(
            trace, portfolio, lifecycle, train_fraction, options, *host.values(), keying
        )
        decided = [md for md in modes if not md.host_included]  # host-included: not decided, no power
        found = power.detectable_effects(decided, costs, opts, thresholds, train_fraction, seed)
        for mode, statement in found.items():
            stage.log.info("%s: %s", mode, statement["text"])
        verdict = decision.with_detectable_effects(verdict, found)
    stage.write("decision", verdict)


run_stage(snakemake, main)
