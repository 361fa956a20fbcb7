"""Soak the ledger: hundreds of SIGKILLs. ``python tests/ledger/soak.py --kills 300``.

Add ``--postgres`` to soak the shared PostgreSQL ledger with two live processes instead.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from crash_harness import run_sqlite
from crash_postgres import run_postgres_pair


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kills", type=int, default=300)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--postgres", metavar="URL", nargs="?", const="postgresql://postgres@127.0.0.1:5432/test"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        if args.postgres:
            import psycopg

            prefix = f"soak{uuid.uuid4().hex[:8]}_"
            try:
                report = run_postgres_pair(
                    args.postgres, prefix, Path(folder), kills=args.kills, seed=args.seed
                )
            finally:
                with psycopg.connect(args.postgres, autocommit=True) as conn:
                    for table in ("ledger", "owners", "kv"):
                        conn.execute(f"DROP TABLE IF EXISTS {prefix}{table}")
        else:
            report = run_sqlite(Path(folder), kills=args.kills, seed=args.seed)
    print(report.summary())
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
