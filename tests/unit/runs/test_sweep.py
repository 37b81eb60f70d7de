"""A sweep's estimate (`appliance.runs.sweep`): the trial-time bound at the assumed read rate."""

import pytest

from appliance.runs.sweep import estimate_seconds
from appliance.runs.trial_time import ASSUMED_READ_BPS, trial_read_bytes
from tests.unit.runs.test_trial_time import GIB


def test_the_sweep_estimate_reads_the_same_bound_at_the_assumed_rate() -> None:
    per_trial = trial_read_bytes(GIB, 64, 8, 64) / ASSUMED_READ_BPS
    assert estimate_seconds(9, GIB, 64, 8, 64) == pytest.approx(9 * (10 + per_trial) + 10)
