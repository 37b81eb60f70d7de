"""Trials flagged not comparable (`appliance.analysis.contamination`: measured decode reads
below Belady for their own trace) stay out of evidence comparisons.

A sweep's medians already leave them out (the sweep analysis lists them in `not_comparable`):
the comparison names them as a caveat. A run's per-variant medians include every trial, so a
run with a flagged trial (analysis/paging.json) cannot be compared: it is a blocker.
"""

from pathlib import Path
from typing import Any

from appliance.analysis.contamination import comparable
from appliance.core.errors import ConfigError
from appliance.core.strict_load import load_json
from appliance.runs.run_dir import RunDir


def _paging_rows(bundle: Path) -> list[Any]:
    path = RunDir(bundle).paging_analysis
    try:
        record = load_json(path) if path.is_file() else {}
    except ConfigError:
        return []
    rows = record.get("lru_prediction") if isinstance(record, dict) else None
    return rows if isinstance(rows, list) else []


def with_contamination(
    bundle: Path, results: dict[str, Any], blockers: list[str], caveats: list[str]
) -> tuple[list[str], list[str]]:
    """(blockers, caveats) with the bundle's not-comparable trials added."""
    sweep = results.get("sweep")
    skipped = sweep.get("not_comparable") if isinstance(sweep, dict) else None
    if isinstance(skipped, list) and skipped:
        caveats = [
            *caveats,
            "left out of the sweep's figures, measured decode reads below Belady (not comparable): "
            + ", ".join(str(name) for name in skipped),
        ]
    flagged = [
        str(row.get("trial"))
        for row in _paging_rows(bundle)
        if isinstance(row, dict) and isinstance(row.get("contamination"), dict) and not comparable(row)
    ]
    if flagged:
        blockers = [
            *blockers,
            "trials with measured decode reads below Belady for their own trace (not comparable; "
            "rerun them one at a time on an isolated page cache): " + ", ".join(flagged),
        ]
    return blockers, caveats
