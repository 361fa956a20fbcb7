"""The event loop's instructions a reply through the SQLite ledger, counted by valgrind.

A diagnostic, not a benchmark (no figure, no target). On this shared machine two runs of the
same code, back to back, differ by up to 40 % in replies a second and by 20 % in CPU time a
reply, so a change worth 3 % cannot be seen in either. Instructions are counted, not sampled:
the same code gives the same count within a few tenths of a percent.

It runs ``bench_ledger.submit_rate`` (512 replies in flight, a no-op platform, the writer
process by default, claimed at the turn by default) under ``valgrind --tool=callgrind`` twice,
at the same time: once with the warm-up only, once with ``--replies`` more. The difference
over ``--replies`` is the main process's instructions a reply, with the start-up, the imports
and the warm-up taken out. The writer process is not under valgrind (valgrind does not follow
children unless told), so what is counted is the event loop's side: the ledger, the store,
the hand-over to the child and asyncio's own machinery. Under valgrind the loop runs about 50
times slower beside a child at full speed, so its batches are smaller than in the benchmark
and each batch's own cost weighs a little more.

Start-up's objects are frozen first, as ``run_all.py`` measures and the gateway runs (ADR 0156,
ADR 0192); ``--no-freeze`` leaves them to the collector.

Run: ``python bench/diag_ledger_instructions.py [--replies 10000] [--submit] [--writer thread]
[--no-freeze]`` (about a minute for 10,000 replies). Needs ``valgrind`` on the ``PATH``. To
compare two versions of the code, run it on each checkout.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import anyio

WARM = 2000


async def workload(replies: int, begins: bool, writer: str, freeze: bool) -> None:
    """The replies counted: the warm-up, then ``replies`` more (none: the baseline run)."""
    from bench_ledger import submit_rate

    from bridge_core.commands.run import freeze_startup_objects
    from bridge_core.ledger import open_store

    if freeze:  # as ``run_all.py`` measures, and the gateway runs (ADR 0156, ADR 0192)
        freeze_startup_objects()

    with tempfile.TemporaryDirectory() as folder:
        store = await open_store(Path(folder) / "ledger.db", sqlite_writer=writer)  # type: ignore[arg-type]
        try:
            await submit_rate(store, replies=WARM, in_flight=512, tag="w", begins=begins)
            if replies:
                await submit_rate(store, replies=replies, in_flight=512, tag="r", begins=begins)
        finally:
            await store.aclose()


def counted(replies: int, begins: bool, writer: str, freeze: bool) -> subprocess.Popen[str]:
    """A run of ``workload`` under callgrind; its total is on its standard error."""
    command = [
        "valgrind",
        "--tool=callgrind",
        "--callgrind-out-file=/dev/null",
        sys.executable,
        __file__,
        "--child",
        str(replies),
        "turn" if begins else "submit",
        writer,
        "freeze" if freeze else "no-freeze",
    ]
    return subprocess.Popen(command, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)


def total(run: subprocess.Popen[str]) -> int:
    _, err = run.communicate()
    found = re.search(r"Collected : (\d+)", err)
    if run.returncode != 0 or found is None:
        raise SystemExit(f"the run under valgrind failed ({run.returncode}):\n{err[-2000:]}")
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--replies", type=int, default=10_000)
    parser.add_argument("--submit", action="store_true", help="claimed at record, not at the turn")
    parser.add_argument("--writer", choices=["process", "thread"], default="process")
    parser.add_argument(
        "--no-freeze",
        action="store_true",
        help="leave start-up's objects to the collector (the collector's share of the count)",
    )
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        replies, mode, writer, frozen = args.child
        anyio.run(workload, int(replies), mode == "turn", writer, frozen == "freeze")
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed: apt-get install valgrind")
    begins = not args.submit
    freeze = not args.no_freeze
    base = counted(0, begins, args.writer, freeze)
    more = counted(args.replies, begins, args.writer, freeze)
    baseline, measured = total(base), total(more)
    per_reply = (measured - baseline) / args.replies
    mode = "claimed at the turn" if begins else "submit (claimed at record)"
    frozen = "start-up frozen" if freeze else "start-up not frozen"
    print(
        f"{mode}, writer {args.writer}, {frozen}: {per_reply:,.0f} instructions a reply on "
        f"the event loop's process ({args.replies:,} replies; baseline {baseline:,}, "
        f"with them {measured:,})"
    )


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    main()
