import json

from headroom.core.stage import run_stage


def main(stage):
    from headroom import dispatch
    from headroom.analysis import recommendation
    from headroom.core import artifacts, defaults
    from headroom.families import stages

    runs = stage.input_paths("portfolio")
    # a kernel family's study: what its trace records of the family (None: attention's)
    family = stage.read_provenance("trace").get("extra", {}).get("family")
    attention = not family or family.get("name", "attention") == "attention"
    meta = {
        "study": stage.study,
        "decision_blake3": artifacts.recorded_hash(stage.input_path("decision")),
        # the kernels the portfolio timed (a replay: the recorded run's) and kernels/deploy.py; a
        # family's table stands for the family's source instead (its record's source_blake3)
        "kernel_source_blake3": dispatch.kernel_source_blake3(
            dispatch.study_kernel_code(artifacts.read_provenance(runs[0])["code"])
        )
        if attention
        else None,
    }
    reads = ("decision", "trace", "lifecycle", "candidates", "calibration", "environment")
    decision, trace, lifecycle, candidates, calibration, environment = (stage.read(n) for n in reads)
    layer = {**defaults.section("recommendation"), **(stage.params["recommendation"] or {})}
    table, content = recommendation.build(
        decision, trace, stage.read_all("portfolio"), lifecycle, candidates, calibration, environment,
        meta=meta, policies=stage.params["policies"], deployment=stage.params["decision"].get("deployment"),
        intermediate_ratio=float(layer["intermediate_ratio"]), keying=stages.keying(stage),
        family=None if attention else family,
    )  # fmt: skip
    content["provenance"] = stage.provenance()
    data = json.dumps(content, indent=1, sort_keys=True, allow_nan=False).encode() + b"\n"
    digest = artifacts.write_file(stage.output_path("dispatch"), data)
    table["dispatch_blake3"] = digest
    stage.write(
        "recommendation", table, extra_provenance={"dispatch": {"path": "dispatch.json", "blake3": digest}}
    )
    for _, r in table.drop_duplicates("scope").iterrows():
        stage.log.info("%s: %s -> ship %s %s", r["scope"], r["verdict"], r["ship"], r["kernel"])


run_stage(snakemake, main)
