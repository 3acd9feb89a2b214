"""The roofline model: predicted vs measured, and the fusion saving split into traffic and launches."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd

from headroom.report.model import Figure, Section, all_skipped, png, skipped, table


def section(rf: pd.DataFrame | None, why: str) -> Section:
    title = "Roofline: predicted vs measured"
    if rf is None:
        return skipped("roofline", title, why)
    if reason := all_skipped(rf):
        return skipped("roofline", title, reason)
    ok = rf[rf["status"] == "ok"]
    s = Section("roofline", title)
    both = ok.dropna(subset=["measured_us"])
    if both.empty:
        s.text.append("No candidate has both a prediction and a measurement in the same mode.")
    else:
        fig, ax = plt.subplots(layout="constrained", figsize=(5, 4.2))
        for (mode, fused), g in both.groupby(["mode", "fused"], sort=True):
            ax.scatter(
                g["predicted_us"], g["measured_us"], s=12, label=f"{mode}, {'fused' if fused else 'unfused'}"
            )
        lo = float(min(both["predicted_us"].min(), both["measured_us"].min()))
        hi = float(max(both["predicted_us"].max(), both["measured_us"].max()))
        ax.plot([lo, hi], [lo, hi], color="black", lw=0.8, label="measured = predicted")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("predicted (us)")
        ax.set_ylabel("measured (us)")
        ax.legend(fontsize=7)
        s.figures.append(Figure("roofline_predicted_vs_measured", "Roofline predicted vs measured", png(fig)))
        summary = both.groupby(["mode", "phase", "residency", "fused"], as_index=False).agg(
            rows=("measured_us", "size"),
            measured_over_predicted_median=("measured_over_predicted", "median"),
            measured_over_predicted_min=("measured_over_predicted", "min"),
            measured_over_predicted_max=("measured_over_predicted", "max"),
        )
        s.tables.append(table("measured / predicted", summary))
    split = (
        ok[ok["fused"]]
        .groupby(["mode", "phase"], as_index=False)
        .agg(
            traffic_saved_us=("traffic_saved_us", "median"),
            launches_saved_us=("launches_saved_us", "median"),
            launch_share_pct=("launch_share_pct", "median"),
            fusion_saving_pred_us=("fusion_saving_pred_us", "median"),
            fusion_saving_measured_us=("fusion_saving_measured_us", "median"),
        )
    )
    s.tables.append(
        table(
            "Fusion saving split (medians over tiles and shapes)",
            split,
            "traffic = difference of max(compute, memory); launches = launches saved x launch overhead of the mode",
        )
    )
    if (rf["status"] != "ok").any():
        s.text.append(
            "Rows without a prediction: " + "; ".join(sorted(set(rf.loc[rf["status"] != "ok", "reason"])))
        )
    return s
