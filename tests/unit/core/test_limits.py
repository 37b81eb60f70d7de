"""The ranges the command line enforces are the ranges the profile schema enforces."""

import json

from appliance.core.limits import MAX_N_PREDICT, MAX_REPEATS, MAX_SEED
from tests.conftest import REPO


def test_profile_schema_and_cli_share_the_same_maxima() -> None:
    schema = json.loads((REPO / "appliance" / "schemas" / "profile.schema.json").read_text())
    found = {}

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for key in ("repeats", "seed", "n_predict"):
                if isinstance(node.get(key), dict) and "maximum" in node[key]:
                    found[key] = node[key]["maximum"]
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    assert found == {"repeats": MAX_REPEATS, "seed": MAX_SEED, "n_predict": MAX_N_PREDICT}
