from headroom.core.stage import run_stage
from headroom.families import load, stages
from headroom.families.study import ATTENTION, attention_identity, family_trace, tagged
from headroom.trace.invocations import build, clip_note, describe_text


def main(stage):
    family = stage.params.get("family")
    if family is not None:  # a kernel family's calls over the engine's steps (docs/families.md)
        loaded = load(family["spec"], device=family["device"])
        trace, facts = family_trace(loaded.family, stage.read("steps"), stage.params["trace"])
        stage.log.info(
            "family %s %s (source blake3 %s): %d steps -> %d calls %s, %d sampled, %d shapes",
            loaded.family.name, loaded.family.version, loaded.source_blake3[:16], facts["steps"],
            facts["window_invocations"], facts["window_by_kind"], len(trace), trace["shape_key"].nunique(),
        )  # fmt: skip
        # what each call costs by the family's own account: the roofline's terms (headroom.analysis)
        trace = stages.cost_columns(loaded.family, trace)
        stage.write("trace", trace, extra_provenance={**facts, "family": loaded.identity()})
        return
    # Relative request-log paths resolve against the working directory: the project root.
    trace, provenance = build(stage.params["trace"], stage.params["partition"], base_dir=".")
    stage.log.info("invocation mix:\n%s", describe_text(trace, extra=provenance))
    note = clip_note(provenance)
    if note and note.startswith("warning: "):
        stage.log.warning(note.removeprefix("warning: "))
    stage.write(
        "trace", tagged(trace, ATTENTION), extra_provenance={**provenance, "family": attention_identity()}
    )


run_stage(snakemake, main)
