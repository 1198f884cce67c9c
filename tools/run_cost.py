"""Save the cost a run folder's balance experiment simulates with as RUN/cost.json, so that
`python -m suite simulate | forecast --cost RUN` price steps as that run did.

    PYTHONPATH=. python tools/run_cost.py reports/reference/h100/full-c2036da
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from suite.experiments.balance import run_cost  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run", type=Path, help="a run folder with results/costmodel_fit.csv")
    a = p.parse_args(argv)
    try:
        cost = run_cost(a.run)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    cost.save(a.run / "cost.json")
    print(f"wrote {a.run / 'cost.json'}: {cost.source}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
