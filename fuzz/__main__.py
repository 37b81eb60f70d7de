"""`python -m fuzz [--cases N] [--seed S] [--reader NAME ...]`: mutated inputs through every
reader, one table line per reader; exits 1 on any foreign exception, crash or hang."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from fuzz.readers import READERS
from fuzz.run import fuzz_reader, table


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # the workers and the work directory are cleaned up on the way out


def main() -> int:
    signal.signal(signal.SIGTERM, _interrupt)
    parser = argparse.ArgumentParser(prog="python -m fuzz", description=__doc__)
    parser.add_argument("--cases", type=int, default=100_000, help="cases per reader")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--reader", action="append", choices=sorted(READERS), help="reader to fuzz (repeatable; default all)"
    )
    parser.add_argument(
        "--workers", type=int, default=None, help="worker processes (default: 2, 4 for the remote reader)"
    )
    parser.add_argument(
        "--save", type=Path, default=Path(".cache/fuzz"), help="where failing inputs are written"
    )
    args = parser.parse_args()
    tallies = []
    for name in args.reader or list(READERS):
        tally = fuzz_reader(
            name,
            args.cases,
            args.seed,
            args.workers,
            args.save,
            progress=lambda t: print(f"  ... {table([t]).splitlines()[1]}", flush=True),
        )
        tallies.append(tally)
        lines = table([tally]).splitlines()
        print("\n".join(lines if len(tallies) == 1 else lines[1:]), flush=True)
        for failure in tally.failures[:5]:
            print(f"  case {failure.index}: {failure.kind}: {failure.detail}", flush=True)
    print()
    print(table(tallies))
    bad = sum(t.bad for t in tallies)
    if bad:
        print(
            f"{bad} cases ended in a foreign exception, a crash or a hang; inputs in {args.save}",
            file=sys.stderr,
        )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
