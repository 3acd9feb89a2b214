from headroom.core.stage import run_stage
from headroom.families import load
from headroom.families.attention.candidates import build
from headroom.families.study import ATTENTION, attention_identity, candidates_table, tagged


def main(stage):
    params = stage.params
    family = params.get("family")
    if family is not None:  # a kernel family's own candidates (docs/families.md)
        loaded = load(family["spec"], device=family["device"])
        candidates = candidates_table(loaded.family)
        stage.write("candidates", candidates, extra_provenance={"family": loaded.identity()})
        return
    candidates = build(
        params["tiles"],
        params["rope"],
        params["native"],
        generation=int(params["generation"]),
        varlen=bool(params["varlen"]),
    )
    stage.write(
        "candidates", tagged(candidates, ATTENTION), extra_provenance={"family": attention_identity()}
    )


run_stage(snakemake, main)
