import time

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
    environment = stage.read("environment")
    # a decision on GPU measurements: what could it detect? Its power curves run in forked workers
    # while this process computes the figures and the verdict
    cuda, decided, opts, costs = decision.device_of(environment) == "cuda", [], None, None
    if cuda:
        opts, costs, modes = measured.checked_modes(
            trace, portfolio, lifecycle, train_fraction, options, *host.values(), keying
        )
        decided = [md for md in modes if not md.host_included]  # host-included: not decided, no power
    with power.detecting(decided, costs, opts, thresholds, train_fraction, seed) as found:
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
            environment,
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
        waited = time.perf_counter()
        statements = found()
        waited = time.perf_counter() - waited
    if decided:  # how much of the power simulation the figures did not hide (issue 36: stage time)
        stage.log.info("power curves: waited %.2f s for them after the verdict", waited)
    for mode, statement in statements.items():
        stage.log.info("%s: %s", mode, statement["text"])
    if cuda:
        verdict = decision.with_detectable_effects(verdict, statements)
    stage.write("decision", verdict)


run_stage(snakemake, main)
