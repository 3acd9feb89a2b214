from headroom.core.stage import run_stage
from headroom.measure import device


def main(stage):
    from headroom.measure import lifecycle
    from headroom.measure.correctness import admitted

    candidates = admitted(stage.read("candidates"), stage.read("correctness"))
    df = lifecycle.run(
        stage.read("trace"),
        candidates,
        stage.params["lifecycle"],
        device=stage.device,
        policies=stage.params["policies"],
        rope_base=float(stage.params["rope_base"]),
        log=stage.log,
    )
    stage.write("lifecycle", df)


run_stage(snakemake, main, device=device)
