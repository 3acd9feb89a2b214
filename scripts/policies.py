from headroom.core.stage import run_stage


def main(stage):
    from headroom.core import defaults
    from headroom.decide import policy_eval

    options = dict(stage.params["policies"])
    train_fraction = options.pop("train_fraction")
    seed = options.pop("seed", defaults.value("policies", "seed"))
    policy_eval = policy_eval.evaluate(
        stage.read("trace"),
        stage.read_all("portfolio"),
        stage.read("lifecycle"),
        train_fraction=train_fraction,
        seed=seed,
        **options,
    )
    stage.write("policy_eval", policy_eval)
    stage.write("factorial", policy_eval.factorial(policy_eval))


run_stage(snakemake, main)
