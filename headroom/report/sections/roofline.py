"""The roofline model: predicted vs measured, and the fusion saving split into traffic and launches."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd

from headroom.report.family import FamilyView
from headroom.report.model import Section, figure, legend_outside, log_axis, rate, table, unusable
from headroom.report.ship import family

PEAKS = {"hbm_bytes_per_s": "HBM bandwidth", "matmul_flops_per_s": "matmul rate"}


def section(
    rf: pd.DataFrame | None, why: str, cal: pd.DataFrame | None = None, fam: FamilyView | None = None
) -> Section:
    title = "Roofline: predicted vs measured"
    if (gone := unusable("roofline", title, rf, why)) is not None:
        return gone
    if fam is not None:
        return family_section(rf, cal, fam, title)
    ok = rf[rf["status"] == "ok"]
    s = Section("roofline", title)
    both = ok.dropna(subset=["measured_us"])
    if both.empty:
        s.text.append("No candidate has both a prediction and a measurement in the same mode.")
    else:
        s.figures.append(_scatter(both))
        s.tables.append(achieved(both, cal))
        summary = both.groupby(["mode", "phase", "residency", "fused"], as_index=False).agg(
            rows=("measured_us", "size"),
            measured_over_predicted_median=("measured_over_predicted", "median"),
            measured_over_predicted_min=("measured_over_predicted", "min"),
            measured_over_predicted_max=("measured_over_predicted", "max"),
        )
        s.tables.append(table("measured / predicted", summary))
        s.text.append(
            "Achieved rates are computed here from the roofline's hbm_bytes, flops and measured_us, and the "
            "calibration's hbm_bytes_per_s and matmul_flops_per_s (the calibrated peaks)."
        )
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


def family_section(rf: pd.DataFrame, cal: pd.DataFrame | None, fam: FamilyView, title: str) -> Section:
    """A family's roofline (``headroom.analysis.family_roofline``: from what the family says each
    shape costs): predicted vs measured per mode and candidate; no phase, no fusion saving."""
    ok = rf[rf["status"] == "ok"]
    s = Section("roofline", title)
    s.text.append(
        f"The prediction is from what family {fam.name} says each shape costs (Family.cost: flops and "
        "bytes), at the calibrated peaks, plus one launch."
    )
    both = ok.dropna(subset=["measured_us"])
    if both.empty:
        s.text.append("No candidate has both a prediction and a measurement in the same mode.")
    else:
        s.figures.append(_scatter(both, by_fusion=False))
        s.tables.append(achieved(both, cal, keys=("mode", "candidate")))
        summary = both.groupby(["mode", "residency"], as_index=False).agg(
            rows=("measured_us", "size"),
            measured_over_predicted_median=("measured_over_predicted", "median"),
            measured_over_predicted_min=("measured_over_predicted", "min"),
            measured_over_predicted_max=("measured_over_predicted", "max"),
        )
        s.tables.append(table("measured / predicted", summary))
    s.text.append(fam.not_applicable("none of its candidates is fused", "Fusion saving split"))
    if (rf["status"] != "ok").any():
        s.text.append(
            "Rows without a prediction: " + "; ".join(sorted(set(rf.loc[rf["status"] != "ok", "reason"])))
        )
    return s


def _scatter(both: pd.DataFrame, by_fusion: bool = True):
    """Measured against predicted latency, log-log, a colour per (mode, fusion) (a family's: per mode)."""
    fig, ax = plt.subplots(layout="constrained", figsize=(5, 4.2))
    groups = both.groupby(["mode", "fused"] if by_fusion else ["mode"], sort=True)
    for key, g in groups:
        mode, fused = key if by_fusion else (key[0], None)
        label = f"{mode}, {'fused' if fused else 'unfused'}" if by_fusion else str(mode)
        ax.scatter(g["predicted_us"], g["measured_us"], s=12, label=label)
    lo = float(min(both["predicted_us"].min(), both["measured_us"].min()))
    hi = float(max(both["predicted_us"].max(), both["measured_us"].max()))
    ax.plot([lo, hi], [lo, hi], color="black", lw=0.8, label="measured = predicted")
    ax.set_xscale("log")
    ax.set_yscale("log")
    log_axis(ax.xaxis)
    log_axis(ax.yaxis)
    ax.set_xlabel("predicted (µs)")
    ax.set_ylabel("measured (µs)")
    legend_outside(fig, ax)
    return figure("roofline_predicted_vs_measured", "Roofline predicted vs measured", fig)


def _peak(cal: pd.DataFrame | None, name: str) -> float:
    if cal is None or "name" not in cal.columns:
        return float("nan")
    ok = cal[(cal["name"] == name) & (cal.get("status", "ok") == "ok")]["value"]
    return float(ok.iloc[0]) if len(ok) and pd.notna(ok.iloc[0]) else float("nan")


def achieved(both: pd.DataFrame, cal: pd.DataFrame | None, keys=("mode", "phase", "family")):
    """Achieved TB/s and TFLOP/s per (mode, phase, family) (a kernel family's: per mode and
    candidate): medians and maxima over candidates and shapes, and % of the calibrated peak (n/a
    where the study has no calibration)."""
    hbm, mm = _peak(cal, "hbm_bytes_per_s"), _peak(cal, "matmul_flops_per_s")
    r = both.assign(
        family=[family(c) for c in both["candidate"]],
        tb_s=both["hbm_bytes"] / both["measured_us"] / 1e6,
        tflop_s=both["flops"] / both["measured_us"] / 1e6,
    )
    g = r.groupby(list(keys), as_index=False).agg(
        rows=("tb_s", "size"),
        median_tb_per_s=("tb_s", "median"),
        max_tb_per_s=("tb_s", "max"),
        median_tflop_per_s=("tflop_s", "median"),
        max_tflop_per_s=("tflop_s", "max"),
    )
    g["max_of_hbm_peak_pct"] = 100.0 * g["max_tb_per_s"] * 1e12 / hbm
    g["max_of_matmul_peak_pct"] = 100.0 * g["max_tflop_per_s"] * 1e12 / mm
    g = g.rename(
        columns={
            "median_tb_per_s": "median TB/s",
            "max_tb_per_s": "max TB/s",
            "median_tflop_per_s": "median TFLOP/s",
            "max_tflop_per_s": "max TFLOP/s",
        }
    )
    note = (
        f"calibrated peaks: HBM {rate(hbm, 'B/s')}, matmul {rate(mm, 'FLOP/s')}"
        if pd.notna(hbm) and pd.notna(mm)
        else "no calibrated peak in this study (calibration not read or skipped): % of peak is n/a"
    )
    return table("Achieved bandwidth and compute rate, and % of the calibrated peak", g, note)
