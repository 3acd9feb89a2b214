from headroom.core.stage import run_stage
from headroom.measure import device


def main(stage):
    from headroom.measure import portfolio
    from headroom.measure.correctness import admitted

    candidates = admitted(stage.read("candidates"), stage.read("correctness"))
    rows, samples = portfolio.run(
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
