from headroom.core.stage import run_stage
from headroom.measure import device


def main(stage):
    from headroom.families import stages
    from headroom.families.attention import lifecycle
    from headroom.measure import family_runs
    from headroom.measure.correctness import admitted

    candidates = admitted(stage.read("candidates"), stage.read("correctness"))
    family = stages.loaded(stage)
    if family is not None:  # a kernel family's candidates (docs/families.md)
        df = family_runs.lifecycle(
            family.family, family.spec, stage.read("trace"), list(candidates["candidate"]),
            stage.params["lifecycle"], device=stage.device, policies=stage.params["policies"],
            keying=stages.keying(stage), log=stage.log,
        )  # fmt: skip
        stage.write("lifecycle", df)
        return
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
