"""The mutation score per module, from what `mutmut run` left in mutants/ (`make mutation`).

For each module of `[tool.mutmut] only_mutate` (pyproject.toml): its mutants, how many the
tests killed (a timeout counts: the tests did not pass), how many survivors are listed as
equivalent in tests/mutation/equivalent.txt (with the reason), and the other survivors
(mutants no test covers included). The score is killed over the checked, non-equivalent
mutants (a run stopped early leaves some unchecked, shown beside the score); the exit
status is 1 when a module is below --min (percent) or equivalent.txt names a mutant that is
not a survivor (stale: killed now, or renamed by a change of the module).
"""

from __future__ import annotations

import argparse
import json
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EQUIVALENT = Path(__file__).with_name("equivalent.txt")
KILLED = {1, 3, 24, -24, 152, 255, 36, 37}  # mutmut exit codes: failed, error, timeouts, type check
NOT_CHECKED = None


@dataclass
class Score:
    module: str
    mutants: int
    killed: int
    equivalent: int
    survived: list[str]
    unchecked: int

    @property
    def percent(self) -> float:
        """Killed over the checked, non-equivalent mutants."""
        relevant = self.mutants - self.unchecked - self.equivalent
        return 100.0 * self.killed / relevant if relevant else 100.0


def modules(root: Path = ROOT) -> list[str]:
    config = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["mutmut"]
    return list(config["only_mutate"])


def equivalents(path: Path = EQUIVALENT) -> dict[str, str]:
    """mutant name -> why it is equivalent; lines `NAME  reason`, `#` starts a comment."""
    found: dict[str, str] = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, _, reason = line.partition(" ")
        if not reason.strip():
            raise SystemExit(f"{path}:{number}: {name} needs a reason after the name")
        found[name] = reason.strip()
    return found


def exit_codes(module: str, root: Path = ROOT) -> dict[str, int | None]:
    meta = root / "mutants" / f"{module}.meta"
    if not meta.is_file():
        return {}
    codes: dict[str, int | None] = json.loads(meta.read_text())["exit_code_by_key"]
    return codes


def score(module: str, listed: dict[str, str], root: Path = ROOT) -> Score:
    codes = exit_codes(module, root)
    survivors = sorted(name for name, code in codes.items() if code not in KILLED and code is not NOT_CHECKED)
    return Score(
        module=module,
        mutants=len(codes),
        killed=sum(code in KILLED for code in codes.values()),
        equivalent=sum(name in listed for name in survivors),
        survived=[name for name in survivors if name not in listed],
        unchecked=sum(code is NOT_CHECKED for code in codes.values()),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--min", type=float, default=90.0, help="lowest acceptable score, percent")
    parser.add_argument("--list", action="store_true", help="name every non-equivalent survivor")
    args = parser.parse_args(argv)
    listed = equivalents()
    scores = [score(module, listed) for module in modules()]
    print(f"{'module':<36} {'mutants':>7} {'killed':>7} {'equiv':>6} {'survived':>8} {'score':>7}")
    for s in scores:
        note = f"  ({s.unchecked} not checked)" if s.unchecked else ""
        shown = f"{s.percent:>6.1f}%" if s.mutants > s.unchecked else "    n/a"
        print(
            f"{s.module:<36} {s.mutants:>7} {s.killed:>7} {s.equivalent:>6} "
            f"{len(s.survived):>8} {shown}{note}"
        )
        if args.list:
            for name in s.survived:
                print(f"    survived: {name}")
    codes = {name: code for module in modules() for name, code in exit_codes(module).items()}
    every = set(codes)
    # stale: checked and killed; a listed mutant not checked yet is only unchecked (counted above)
    stale = sorted(name for name in listed if name in every and codes[name] in KILLED)
    unknown = sorted(name for name in listed if name not in every)
    for name in stale:
        print(f"{EQUIVALENT.name}: {name} is listed as equivalent but was killed: remove it")
    for name in unknown if every else []:
        print(f"{EQUIVALENT.name}: {name} is not a mutant of this code (renamed?): update the list")
    low = [s.module for s in scores if s.mutants and (s.percent < args.min or s.unchecked)]
    if low:
        print(f"below {args.min:g}% or not all checked: {', '.join(low)}")
    return 1 if low or stale or (unknown and every) else 0


if __name__ == "__main__":
    sys.exit(main())
