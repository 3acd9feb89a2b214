from headroom.core.stage import run_stage


def main(stage):
    from headroom.core import defaults
    from headroom.decide import policy_eval
    from headroom.families import stages

    options = dict(stage.params["policies"])
    train_fraction = options.pop("train_fraction")
    seed = options.pop("seed", defaults.value("policies", "seed"))
    layer = {**defaults.section("recommendation"), **(stage.params["recommendation"] or {})}
    table = policy_eval.evaluate(
        stage.read("trace"),
        stage.read_all("portfolio"),
        stage.read("lifecycle"),
        train_fraction=train_fraction,
        seed=seed,
        calibration=stage.read("calibration"),
        intermediate_ratio=float(layer["intermediate_ratio"]),
        keying=stages.keying(stage),
        **options,
    )
    stage.write("policy_eval", table)
    stage.write("factorial", policy_eval.factorial(table))


run_stage(snakemake, main)
