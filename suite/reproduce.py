"""`python -m suite reproduce`: run every experiment into a run directory, then build the report.

Per experiment, in REGISTRY order:
  done marker present (and no --force)  -> skipped, its tables are reused (resume)
  NEEDS == "cuda" without a GPU          -> not run; results/<name>.notrun.json holds the reason
  import or run() raises                 -> results/<name>.error.txt holds the traceback; others run
  --budget and it would not fit           -> deferred: its module's SECONDS[profile] (an H200's
                                             time) would end past the deadline, or an upstream
                                             experiment was deferred; later ones that fit run
  run() raises WorkDeferred               -> deferred: it kept what it finished (training)
  otherwise                              -> each table written atomically, then <name>.done.json
Then (rank 0 only) suite.report.build recomputes metrics and verdicts from the raw tables and
writes metrics.csv, claims.json, figures/, report.html and report.pdf; when work was deferred
the report waits for the invocation that finishes it (exit status 3: rerun the same command).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
import traceback
from contextlib import ExitStack
from pathlib import Path
from types import ModuleType

import pandas as pd

from suite import experiments
from suite.claims import load_claims
from suite.env import commit_label
from suite.progress import Progress
from suite.rundir import (
    RunContext,
    RunDir,
    TableError,
    WorkDeferred,
    atomic_write_text,
    schema,
    write_json,
)
from suite.runguard import (
    UsageError,
    lock,
    other_gpu,
    resume_conflict,
    started_with,
    writable_dir,
)
from suite.stopping import exit_code, stop_on_signals

PROFILES = ("cpu", "quick", "full")
EXIT_DEFERRED = 3  # --budget left work for the next invocation: rerun the same command


def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    try:
        return bool(torch.cuda.is_available())
    except Exception:
        return False


def default_profile() -> str:
    return "quick" if cuda_available() else "cpu"


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m suite reproduce",
        description="Run the AdaptiveLoad experiments into a run directory and write the report\n"
        "(claims.json, figures/, report.html, report.pdf). A rerun with the same --out resumes:\n"
        "finished experiments are skipped unless --force. Exit status 1 when an experiment\n"
        "failed (its traceback is in RUN/results/<name>.error.txt and in the report); 3 when\n"
        "--budget left work for the next invocation (no report yet: rerun the same command).",
        epilog="examples:\n  python -m suite reproduce                      # cpu profile without "
        "a GPU, quick with one\n  python -m suite reproduce --only C1,C11 --out reports/runs/x\n"
        "  python -m torch.distributed.run --nproc-per-node 8 -m suite reproduce --out R\n"
        "  python -m suite reproduce --profile full --out R --budget 540   # repeat until exit 0",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--profile",
        choices=PROFILES,
        default=None,
        help="cpu: CPU-only work, GPU claims not-run (default without CUDA); quick: "
        "every claim in ~8 min on one H200 (default with CUDA); full: larger sweeps, "
        "more steps and seeds; a resumed run keeps its own (another needs --force)",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        metavar="DIR",
        help="run directory (default: reports/runs/<UTC timestamp>-<profile>)",
    )
    p.add_argument(
        "--only",
        default="",
        metavar="LIST",
        help="comma-separated claim ids (C1,C11) and/or experiment names "
        f"({','.join(experiments.REGISTRY)}); upstream experiments are added",
    )
    p.add_argument("--force", action="store_true", help="rerun experiments already done")
    p.add_argument(
        "--seed",
        type=int,
        default=None,
        help="seed passed to every experiment (default 0, or the resumed run's)",
    )
    p.add_argument("--no-report", action="store_true", help="run experiments only")
    p.add_argument(
        "--budget",
        type=float,
        default=None,
        metavar="SECONDS",
        help="this invocation's time budget: an experiment that would end past it (by its "
        "H200 estimate) is left for the next invocation and later ones that fit run first; "
        "training leaves each piece of its work that would not fit, keeps what it finished "
        "and names what is left; the report is built by the invocation that finishes the "
        "work (exit 3 until then); rerun with the same --out to continue (for the full "
        "profile under a 10-minute limit per command, e.g. --budget 540)",
    )
    return p.parse_args(argv)


def select(only: str) -> list[str]:
    """Experiment names for `--only` (claim ids and/or names), upstream added, in REGISTRY order."""
    experiments.check_order()
    names = list(experiments.REGISTRY)
    if not only.strip():
        return names
    producers = {c.id: c.producers for c in load_claims()}
    chosen: set[str] = set()
    for token in (t.strip() for t in only.split(",") if t.strip()):
        if re.fullmatch(r"[Cc]\d+", token):
            cid = token.upper()
            if cid not in producers:
                raise UsageError(f"--only: unknown claim {token!r}; claims are C1..C18")
            chosen |= {n for n in producers[cid] if n in names}
        elif token in names:
            chosen.add(token)
        else:
            raise UsageError(
                f"--only: {token!r} is neither a claim id (C1..C18) nor an "
                f"experiment ({', '.join(names)})"
            )
    todo = list(chosen)
    while todo:
        for up in experiments.DEPENDS.get(todo.pop(), ()):
            if up not in chosen:
                chosen.add(up)
                todo.append(up)
    return [n for n in names if n in chosen]


def check_budget(budget: float | None, profile: str, names: list[str]) -> None:
    """UsageError unless --budget can act: a positive number of seconds, and some selected
    experiment with a time estimate for `profile` (its module's SECONDS) or that spends the
    deadline itself (its module's SPLITS_BY_DEADLINE: training keeps finished pieces)."""
    if budget is None:
        return
    if not budget > 0:
        raise UsageError(f"--budget must be a positive number of seconds, got {budget:g}")
    timed = []
    for name in names:
        try:
            module = experiments.load(name)
            runs_here = getattr(module, "NEEDS", "cpu") != "cuda" or cuda_available()
            acts = profile in getattr(module, "SECONDS", {}) or getattr(
                module, "SPLITS_BY_DEADLINE", False
            )
            timed += [name] if acts and runs_here else []
        except Exception:
            continue  # run_one records why it does not import
    if not timed:
        raise UsageError(
            f"--budget: no selected experiment has a time estimate for the {profile} profile "
            "(its module's SECONDS), so it would change nothing; drop --budget or use "
            "--profile quick or full"
        )


def _clear_records(run: RunDir, name: str) -> None:
    for suffix in (".error.txt", ".notrun.json"):
        (run.results / f"{name}{suffix}").unlink(missing_ok=True)


def _defer_reason(name: str, module: ModuleType, ctx: RunContext, deferred: set[str]) -> str | None:
    """Why `name` waits for the next invocation (--budget), or None. One process only: under
    torchrun every rank must take the same decision, and a clock cannot promise that."""
    deadline = ctx.options.get("deadline")
    if deadline is None or ctx.world_size > 1:
        return None
    if waiting := [up for up in experiments.DEPENDS.get(name, ()) if up in deferred]:
        return f"its input {', '.join(waiting)} was deferred"
    need = getattr(module, "SECONDS", {}).get(ctx.profile)
    left = deadline - time.time()
    if need is not None and need > left:
        return f"needs ~{need:.0f} s, {max(left, 0):.0f} s left"
    return None


def run_one(
    name: str, ctx: RunContext, force: bool, have_cuda: bool, rank: int, deferred: set[str]
) -> str:
    """Run one experiment; returns its status: done | cached | not-run | failed | deferred |
    skipped-rank. A module that does not import is a failure like one whose run() raises: its
    traceback is recorded and its claims read "<name> failed (...)"."""
    run, progress = ctx.run, ctx.progress
    if run.is_done(name) and not force:
        progress.log(f"{name}: done already, reusing its tables (--force reruns)")
        return "cached"
    writer = rank == 0
    try:
        module = experiments.load(name)
        if why := _defer_reason(name, module, ctx, deferred):
            progress.log(f"{name}: deferred to the next invocation ({why})")
            return "deferred"
        needs = getattr(module, "NEEDS", "cpu")
        if rank > 0 and not getattr(module, "DISTRIBUTED", False):
            return "skipped-rank"
        if needs == "cuda" and not have_cuda:
            if writer:
                _clear_records(run, name)
                write_json(run.results / f"{name}.notrun.json", {"reason": "needs a CUDA GPU"})
            progress.log(f"{name}: not run (needs a CUDA GPU)")
            return "not-run"
        if writer:
            run.clear(name)
        started = time.time()
        started_utc = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started))
        ctx.part_commits.clear()
        with progress.stage(name):
            tables = module.run(ctx)
        seconds = time.time() - started
        commit = commit_label()
        if not writer:
            return "done"
        if not isinstance(tables, dict) or not all(
            isinstance(v, pd.DataFrame) for v in tables.values()
        ):
            raise TypeError(f"{name}.run() must return dict[str, DataFrame], got {type(tables)}")
        for table, df in sorted(tables.items()):
            run.write_table(table, df)
        _clear_records(run, name)
        run.mark_done(
            name,
            {
                "experiment": name,
                "profile": ctx.profile,
                "device": ctx.device,
                "world_size": ctx.world_size,
                "seed": ctx.seed,
                # this invocation's commit, then those of parts an earlier invocation of a
                # resumed run finished (--budget): the report shows each
                "git": ", ".join([commit] + sorted(ctx.part_commits - {commit})),
                "seconds": round(seconds, 3),
                "started": started_utc,
                "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "tables": {t: len(df) for t, df in sorted(tables.items())},
                "schema": {t: schema(df) for t, df in sorted(tables.items())},  # checked on read
            },
        )
        progress.log(f"{name}: done in {seconds:.1f} s ({len(tables)} tables)")
        return "done"
    except WorkDeferred as e:
        progress.log(f"{name}: deferred: {e}")
        return "deferred"
    except TableError:
        raise  # an input table cut short or malformed: the run stops with its one-line error
    except Exception as e:
        if writer:
            _clear_records(run, name)
            atomic_write_text(run.results / f"{name}.error.txt", traceback.format_exc())
        progress.log(
            f"{name}: FAILED: {type(e).__name__}: {e} (traceback in results/{name}.error.txt)"
        )
        return "failed"


def main(argv: list[str] | None = None) -> int:
    """Exit status: 0 done, 1 an experiment failed, 2 a usage error (one line), 3 work deferred
    (--budget), 128 + signal number when stopped by SIGINT (130) or SIGTERM (143)."""
    args = parse_args(list(sys.argv[1:] if argv is None else argv))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if args.out is None:
        if world > 1:
            print(
                "error: under torchrun pass --out so every rank uses the same run directory",
                file=sys.stderr,
            )
            return 2
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        args.out = Path("reports") / "runs" / f"{stamp}-{args.profile or default_profile()}"
    try:
        with stop_on_signals(), ExitStack() as guard:
            if rank == 0:  # the one writer: checked and locked before any work
                writable_dir(args.out, "--out")
                guard.enter_context(lock(args.out))
            return _reproduce(args, world, rank)
    except (UsageError, TableError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        print(
            "\ninterrupted: finished experiments are kept, the report is rebuilt whole or not "
            f"at all; rerun with --out {args.out} to resume",
            file=sys.stderr,
        )
        return exit_code(e)


def _reproduce(args: argparse.Namespace, world: int, rank: int) -> int:
    started = time.time()
    run = RunDir(args.out)
    # a resumed run goes on with what it started with unless told otherwise
    recorded = {key: value for key, (value, _) in started_with(run).items()}
    profile = args.profile or recorded.get("profile") or default_profile()
    args.seed = int(recorded.get("seed", 0)) if args.seed is None else args.seed
    names = select(args.only)
    check_budget(args.budget, profile, names)
    have_cuda = cuda_available()
    if rank == 0:
        redo = frozenset(names) if args.force else frozenset()
        if why := resume_conflict(run, {"profile": profile, "seed": args.seed}, redo):
            raise UsageError(why)
    progress = Progress()
    if rank == 0:
        progress.log(
            f"run directory: {run.root}  (profile {profile}, "
            f"{'CUDA' if have_cuda else 'no GPU'}, world size {world})"
        )
        run.results.mkdir(parents=True, exist_ok=True)
        if args.force or not (run.root / "env.json").exists():
            from suite.env import capture

            write_json(run.root / "env.json", capture(profile, world))
        elif reason := other_gpu(run, have_cuda):
            raise UsageError(reason)
    ctx = RunContext(
        run=run,
        profile=profile,
        device="cuda" if have_cuda else "cpu",
        seed=args.seed,
        world_size=world,
        progress=progress,
        options={
            "rank": rank,
            "local_rank": int(os.environ.get("LOCAL_RANK", "0")),
            "deadline": None if args.budget is None else started + args.budget,
        },
    )
    statuses: dict[str, str] = {}
    try:
        with progress.task("experiments", total=len(names)) as bar:
            for name in names:
                deferred = {n for n, s in statuses.items() if s == "deferred"}
                statuses[name] = run_one(name, ctx, args.force, have_cuda, rank, deferred)
                bar.advance()
    finally:
        progress.close()
    if rank != 0:
        # a failure on another rank (in a DISTRIBUTED experiment) exits non-zero, so torchrun stops
        # rank 0 too instead of leaving it in a collective until the process group's timeout
        return 1 if "failed" in statuses.values() else 0
    failed = sorted(n for n, s in statuses.items() if s == "failed")
    deferred = sorted(n for n, s in statuses.items() if s == "deferred")
    if deferred:
        print(
            f"left for the next invocation: {', '.join(deferred)}"
            + (f"; failed: {', '.join(failed)}" if failed else "")
            + f"; rerun the same command (--out {run.root}) to continue; the report is built "
            "when every experiment has run",
            file=sys.stderr,
        )
        return EXIT_DEFERRED
    if args.no_report:
        if failed:
            print(f"failed experiments: {', '.join(failed)} (see results/<name>.error.txt)")
        return 1 if failed else 0
    from suite.report.build import build_report
    from suite.report.console import print_summary

    print("building the report (figures, HTML, PDF) ...", file=sys.stderr, flush=True)
    result = build_report(run.root)
    print_summary(result.claim_rows, run.root)
    print(f"report: {run.root / 'report.html'}  and  {run.root / 'report.pdf'}")
    if failed:
        print(f"failed experiments: {', '.join(failed)} (see results/<name>.error.txt)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
