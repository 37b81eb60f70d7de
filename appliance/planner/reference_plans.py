"""Reference plans in evidence/plans: header-only GGUFs built from published configurations,
planned under the limits each input names. Every output is labelled unverified.

    python -m appliance.planner.reference_plans [INPUT.json ...]   (default: evidence/plans/*.input.json)
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from appliance.core import atomic
from appliance.core.digests import sha256_file
from appliance.core.paths import evidence_dir, repo_root
from appliance.core.units import parse_size
from appliance.models.skeleton import load_input, write_skeleton
from appliance.planner.accounting import account_file
from appliance.planner.plan import PlanLimits, make_plan
from appliance.planner.render import render

LABEL = (
    "UNVERIFIED reference plan: computed from a header-only GGUF built from published "
    "configuration values and an assumed tensor type recipe (see the input's sources); "
    "engine-side sizes are estimates; not measured on the named hardware"
)


def write_reference_plans(input_path: Path, out_dir: Path, skeleton_dir: Path) -> list[Path]:
    """Build the input's header-only GGUF and write one .plan.json and .plan.txt per plan."""
    doc = load_input(input_path)
    stem = input_path.name.removesuffix(".input.json")
    skeleton = skeleton_dir / f"{stem}.header-only.gguf"
    write_skeleton(input_path, skeleton)
    acc = account_file(skeleton)
    acc.source = f"{stem}.header-only.gguf"  # no host paths in evidence
    written = []
    for spec in doc.get("plans", []):
        limits = PlanLimits(
            ram_bytes=parse_size(spec["ram"]),
            vram_bytes=parse_size(spec["vram"]),
            ctx=int(spec.get("ctx", 4096)),
        )
        plan = make_plan(acc, limits)
        known = doc.get("known_file_size")
        record: dict[str, Any] = {
            "label": LABEL,
            "model": doc.get("model"),
            "input": input_path.name,
            "input_sha256": sha256_file(input_path),
            "hardware": spec["name"],
            "tensor_data_bytes": acc.tensor_data_bytes,
            "known_file_size": known,
            "size_vs_known": (None if not known else round((acc.file_size - known) / known, 6)),
            "plan": plan.to_dict(),
            "accounting": acc.summary(),
        }
        base = out_dir / f"{stem}.{spec['name']}"
        json_path = base.with_name(base.name + ".plan.json")
        atomic.write_json(json_path, record)
        text = render(
            acc, plan, "header-only skeleton from the input's published numbers", f"{spec['vram']} given"
        )
        txt_path = base.with_name(base.name + ".plan.txt")
        atomic.write_text(txt_path, f"{LABEL}\n\n{text}\n")
        written += [json_path, txt_path]
    return written


def main(argv: list[str]) -> None:
    plans_dir = evidence_dir() / "plans"
    inputs = [Path(a) for a in argv] or sorted(plans_dir.glob("*.input.json"))
    skeletons = repo_root() / "build" / "skeletons"
    for input_path in inputs:
        for path in write_reference_plans(input_path, input_path.parent, skeletons):
            print(path)


if __name__ == "__main__":
    main(sys.argv[1:])
