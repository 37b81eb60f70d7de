"""The one list of vendored third-party files (`appliance.core.vendored`): each entry's bytes,
sha256, commit and licence, in the fixtures' README and the notices."""

from __future__ import annotations

import hashlib

from appliance.core.vendored import VENDORED
from tests.conftest import REPO
from tests.unit.trace.test_route_import import FIXTURES, REAL


def test_fixtures_are_the_vendored_bytes() -> None:
    readme = (FIXTURES / "README.md").read_text()
    assert sorted(e.path.rsplit("/", 1)[1] for e in VENDORED) == sorted(REAL)
    for entry in VENDORED:
        assert hashlib.sha256((REPO / entry.path).read_bytes()).hexdigest() == entry.sha256
        assert entry.sha256 in readme and entry.commit in readme
        assert (REPO / entry.licence_file).read_text().lstrip().startswith("Apache License")
    notices = (REPO / "THIRD_PARTY_NOTICES.md").read_text()
    assert all(e.sha256 in notices and e.path in notices for e in VENDORED)
