"""`appliance cluster status`: every live node, its targets and what it would run with."""

from typing import Any

from appliance.cluster.connect import alive_nodes, on_node
from appliance.cluster.node import node_report
from appliance.cluster.resources import targets_of

STATUS_TIMEOUT_S = 120


def cluster_status() -> list[dict[str, Any]]:
    """One report per live node: id, host, address, targets, appliance version, lock digest,
    images."""
    import ray

    nodes = alive_nodes()
    targets = [targets_of(n.get("Resources", {})) for n in nodes]
    refs = [
        on_node(n["NodeID"], node_report, t, None, name="appliance-node-status")
        for n, t in zip(nodes, targets, strict=True)
    ]
    reports = []
    for node, node_targets, report in zip(
        nodes, targets, ray.get(refs, timeout=STATUS_TIMEOUT_S), strict=True
    ):
        report.pop("host", None)
        reports.append(
            {
                **report,
                "targets": node_targets,
                "address": node.get("NodeManagerAddress"),
                "head": "node:__internal_head__" in node.get("Resources", {}),
            }
        )
    return reports
