"""A short, fixed-seed fuzz run of every reader (the full run is `make fuzz`): no case may end
in an exception that is not the project's own one-line error, a crash or a hang."""

import pytest

from fuzz.readers import READERS
from fuzz.run import fuzz_reader, table

CASES = 1000  # per reader; `make fuzz` runs 100,000


@pytest.mark.parametrize("reader", sorted(READERS))
def test_short_fuzz_run(reader: str) -> None:
    tally = fuzz_reader(reader, CASES, seed=14)
    print()
    print(table([tally]))
    assert tally.cases == CASES
    failures = [f"case {f.index}: {f.kind}: {f.detail}" for f in tally.failures]
    assert not failures, "\n".join(failures)
    assert tally.counts["refused"] > CASES // 10  # mutants do reach the refusals
    assert tally.counts["accepted"] > 0  # and some still parse
