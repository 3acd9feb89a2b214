from headroom.core.stage import run_stage
from headroom.measure import device


def main(stage):
    from headroom.families import stages
    from headroom.families.attention import graph_sweep
    from headroom.measure.correctness import admitted

    if stages.loaded(stage) is not None:  # the sweep is of attention's RoPE fusion: none for a family
        stage.write("graph_sweep", graph_sweep.not_applicable(stage.params["family"]["spec"], stage.device))
        return
    candidates = admitted(stage.read("candidates"), stage.read("correctness"))
    df = graph_sweep.run(
        candidates, stage.params["graph_sweep"], stage.params["partition"], device=stage.device, log=stage.log
    )
    stage.write("graph_sweep", df)


run_stage(snakemake, main, device=device)
