from headroom.core.stage import run_stage
from headroom.measure import device


def main(stage):
    from headroom.measure import graph_sweep
    from headroom.measure.correctness import admitted

    candidates = admitted(stage.read("candidates"), stage.read("correctness"))
    df = graph_sweep.run(
        candidates, stage.params["graph_sweep"], stage.params["partition"], device=stage.device, log=stage.log
    )
    stage.write("graph_sweep", df)


run_stage(snakemake, main, device=device)
