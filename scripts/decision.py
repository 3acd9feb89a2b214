from headroom.core.stage import run_stage


def main(stage):
    from headroom.analysis import decision

    verdict = decision.decide(
        stage.read("policy_eval"),
        stage.read("graph_sweep"),
        stage.read("environment"),
        confidence=float(stage.params["confidence"]),
        **stage.params["decision"],
    )
    stage.log.info("verdict %s: %s", verdict["verdict"].iloc[0], verdict["reason"].iloc[0])
    stage.write("decision", verdict)


run_stage(snakemake, main)
