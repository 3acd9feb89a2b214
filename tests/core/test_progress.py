"""Long GPU stages log their progress: done/total, elapsed, ETA, and the last step always."""

import logging

from headroom.core.progress import Progress


def _progress(caplog, stage: str, total: int, unit: str, every_s: float) -> Progress:
    """A Progress for `stage` whose INFO lines `caplog` records, on a logger of the stage's own."""
    log = logging.getLogger(f"headroom.test.progress.{stage}")
    caplog.set_level(logging.INFO, logger=log.name)
    return Progress(log, stage, total, unit, every_s=every_s)


def test_progress_logs_counts_and_eta_at_most_every_interval_and_always_at_the_end(caplog):
    progress = _progress(caplog, "correctness", 4, "checks", every_s=3600.0)
    for _ in range(3):
        progress.step()
    assert caplog.messages == []  # within the interval: quiet
    progress.step()
    assert len(caplog.messages) == 1
    assert caplog.messages[0].startswith("correctness: 4/4 checks (100%), ")


def test_every_step_logs_with_a_zero_interval_and_the_eta_shrinks(caplog):
    progress = _progress(caplog, "lifecycle switch", 3, "pairs", every_s=0.0)
    for _ in range(3):
        progress.step()
    assert [m.split(" (")[0] for m in caplog.messages] == [
        "lifecycle switch: 1/3 pairs",
        "lifecycle switch: 2/3 pairs",
        "lifecycle switch: 3/3 pairs",
    ]
    assert "ETA" in caplog.messages[0] and "ETA" not in caplog.messages[-1]
