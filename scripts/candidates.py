from headroom.core.stage import run_stage
from headroom.measure.candidates import build


def main(stage):
    params = stage.params
    candidates = build(
        params["tiles"],
        params["rope"],
        params["native"],
        generation=int(params["generation"]),
        varlen=bool(params["varlen"]),
    )
    stage.write("candidates", candidates)


run_stage(snakemake, main)
