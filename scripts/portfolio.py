from headroom.core.stage import run_stage
from headroom.measure import device


def main(stage):
    from headroom.families import stages
    from headroom.families.attention import portfolio as attention
    from headroom.measure import family_runs, portfolio
    from headroom.measure.correctness import admitted

    listed = stage.read("candidates")
    candidates = admitted(listed, stage.read("correctness"))
    family = stages.loaded(stage)
    if family is not None:  # a kernel family's candidates (docs/families.md)
        section = stage.params["portfolio"]
        rows, samples = family_runs.portfolio(
            family.family, stage.read("trace"), list(candidates["candidate"]), run=int(stage.wildcards["run"]),
            settings=section, device=stage.device, seed=int(portfolio.settings(section)["seed"]),
        )  # fmt: skip
        # a family has no tiles: `tile` is the candidate's place in its candidates table
        rows["tile"] = rows["candidate"].map({c: i for i, c in enumerate(listed["candidate"])})
        stage.write("portfolio", rows)
        stage.write("portfolio_samples", samples)
        return
    rows, samples = attention.run(
        stage.read("trace"),
        candidates,
        stage.params["portfolio"],
        run=int(stage.wildcards["run"]),
        device=stage.device,
        rope_base=float(stage.params["rope_base"]),
        log=stage.log,
    )
    stage.write("portfolio", rows)
    stage.write("portfolio_samples", samples)


run_stage(snakemake, main, device=device)
