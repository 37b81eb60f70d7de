"""CLI: `appliance cluster join|status`: nodes of a Ray cluster that run trials (docs/cluster.md).

ray and appliance.cluster load only inside these commands: the `cluster` extra is optional.
"""

import shlex
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from appliance.cli.options import json_option, lock_option, strict_json
from appliance.core.errors import ApplianceError
from appliance.engine.lock import load_lock


def _require_ray() -> None:
    try:
        import ray  # noqa: F401
    except ImportError:
        raise ApplianceError(
            "Ray is not installed: pip install 'moe-expert-cache-appliance"
            "[cluster]' (or .[cluster] in the checkout)"
        ) from None


@click.group("cluster")
def cluster_group() -> None:
    """Run trials across a lab's machines on Ray: join nodes, list them."""


@cluster_group.command("join")
@click.argument("address")
@click.option("--head", is_flag=True, help="Start the cluster's head here, listening at ADDRESS (HOST:PORT).")
@click.option(
    "--node-ip-address",
    "node_ip",
    default=None,
    help="Address this node is reached at (a private network or tunnel).",
)
@click.option(
    "--num-cpus",
    type=int,
    default=1,
    show_default=True,
    help="CPUs Ray may schedule here (trials take none; Ray's own tasks do).",
)
@click.option(
    "--object-store-memory",
    "object_store",
    type=int,
    default=None,
    metavar="BYTES",
    help="Size of this node's Ray object store.",
)
@click.option(
    "--image",
    "images",
    multiple=True,
    metavar="TARGET=TAG",
    help="Engine image this node uses for TARGET (default: the lock's tags).",
)
@click.option(
    "--temp-dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Ray's session and socket directory on this node (default /tmp/ray).",
)
@click.option("--dry-run", is_flag=True, help="Print the `ray start` command only.")
@lock_option
def join_command(
    address: str,
    head: bool,
    node_ip: str | None,
    num_cpus: int,
    object_store: int | None,
    images: tuple[str, ...],
    temp_dir: Path | None,
    dry_run: bool,
    lock_path: Path | None,
) -> None:
    """Join the Ray cluster at ADDRESS (or start its head with --head), offering this
    machine's targets (probed as `appliance doctor` does) as `appliance-<target>: 1`."""
    from appliance.cluster.join import (
        check_head_answers,
        check_host,
        detect_targets,
        node_environment,
        parse_address,
        parse_images,
        ray_start_command,
        run_ray_start,
    )

    host, port = parse_address(address, "--head ADDRESS" if head else "ADDRESS")  # before Ray or Docker
    if node_ip is not None:
        check_host(node_ip, "--node-ip-address")
    if not head and not dry_run:
        check_head_answers(host, port)
    _require_ray()
    lock = load_lock(lock_path)
    chosen = parse_images(images, lock)
    targets = detect_targets(lock)
    argv = ray_start_command(
        address,
        targets,
        head=head,
        node_ip=node_ip,
        num_cpus=num_cpus,
        object_store_bytes=object_store,
        temp_dir=temp_dir,
    )
    env = node_environment(chosen)
    click.echo(f"targets: {', '.join(targets)}")
    click.echo(" ".join([f"{k}={shlex.quote(v)}" for k, v in env.items()] + [shlex.join(argv)]))
    if dry_run:
        return
    click.echo(run_ray_start(argv, env), nl=False)


@cluster_group.command("status")
@click.option(
    "--address", default="auto", show_default=True, help="The cluster: HOST:PORT, ray://HOST:PORT or auto."
)
@json_option
def status_command(address: str, as_json: bool) -> None:
    """Live nodes: targets, appliance version, engine lock digest, engine images held."""
    from appliance.cluster.connect import connect
    from appliance.cluster.status import cluster_status

    _require_ray()
    connect(address)
    reports = cluster_status()
    if as_json:
        click.echo(strict_json(reports, indent=2, sort_keys=True))
        return
    table = Table(title=f"Ray cluster at {address}: {len(reports)} live nodes")
    for column in ("node", "host", "targets", "appliance", "lock digest", "images"):
        table.add_column(column)
    for r in reports:
        held = "\n".join(
            f"{t}: {i['id'][7:19]} inputs {str(i['inputs_digest'])[:12]} ({i['tag']})" if i else f"{t}: none"
            for t, i in sorted(r["images"].items())
        )
        table.add_row(
            r["node_id"][:12] + (" (head)" if r["head"] else ""),
            r["hostname"],
            ", ".join(r["targets"]) or "none",
            r["appliance_version"],
            r["lock_digest"][:12],
            held,
        )
    Console(width=None if sys.stdout.isatty() else 200).print(table)


COMMANDS: list[click.Command] = [cluster_group]
