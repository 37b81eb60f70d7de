"""Names a cluster agrees on: the custom resource per target and a node's own image choice."""

import os

from appliance.core.strict_load import parse_json

RESOURCE_PREFIX = "appliance-"
# Set by `appliance cluster join --image TARGET=TAG` for the node's Ray processes: the engine
# image this node uses per target, instead of the lock's usual tags.
NODE_IMAGES_ENV = "APPLIANCE_NODE_IMAGES"


def resource_for(target: str) -> str:
    """`appliance-<target>`: one unit per node, so a node runs one trial at a time."""
    return f"{RESOURCE_PREFIX}{target}"


def targets_of(resources: dict[str, float]) -> list[str]:
    """The targets a node registered, from its Ray resources."""
    return sorted(
        name[len(RESOURCE_PREFIX) :]
        for name, amount in resources.items()
        if name.startswith(RESOURCE_PREFIX) and amount > 0
    )


def node_image_overrides() -> dict[str, str]:
    raw = os.environ.get(NODE_IMAGES_ENV)
    if not raw:
        return {}
    value = parse_json(raw, f"${NODE_IMAGES_ENV}")
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}
