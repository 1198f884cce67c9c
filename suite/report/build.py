"""`python -m suite report RUN_DIR`: rebuild metrics, verdicts, figures, HTML and PDF from the raw
tables alone.

Byte-identical rebuilds: inputs are read in sorted order; figures are drawn under fixed rcParams
(`svg.hashsalt`; text kept as text: SVG <text>, TrueType in the PDF) and saved with Date/CreationDate/ModDate set to None; the only
time shown is the run's own timestamp from env.json; stale figure files are removed first.

The outputs (OUTPUTS) are one unit: they are written into RUN/.report.new and swapped in with a
few renames that no signal splits, so a build that fails or is interrupted leaves the run's
report files as they were.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import shutil
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib as mpl
import matplotlib.pyplot as plt
import pandas as pd

from suite import evidence, experiments, spread
from suite.claims import Verdict, evaluate, load_claims
from suite.derived import derive
from suite.report import beyond, describe, html, pdf, plots
from suite.report.pergpu import claim_rows, gpu_name
from suite.report.plots import opening
from suite.report.verdicts import summary as summary_text
from suite.rundir import RunDir, TableError, atomic_write_text, write_json
from suite.runguard import UsageError, lock, writable_dir
from suite.stopping import exit_code, held, stop_on_signals

HOW_TO = "a run directory is what `python -m suite reproduce --out DIR` writes"
OUTPUTS = ("metrics.csv", "claims.json", "figures", "report.html", "report.pdf")
STAGING = ".report.new"


class NotARunDir(Exception):
    """The folder given to `report` lacks what a run directory has."""


@dataclass
class BuildResult:
    run_dir: Path
    verdicts: list[Verdict]
    metrics: pd.DataFrame
    figures: list[str] = field(default_factory=list)
    errors: list[dict] = field(default_factory=list)
    claim_rows: list[dict] = field(default_factory=list)  # the report's (html.claim_rows)


def open_run(run_dir: Path | str) -> RunDir:
    root = Path(run_dir)
    if root.exists() and not root.is_dir():
        raise NotARunDir(f"{root}: not a directory ({HOW_TO})")
    if not root.is_dir():
        raise NotARunDir(f"{root}: no such directory ({HOW_TO})")
    if not (root / "results").is_dir():
        raise NotARunDir(
            f"{root} is not a run directory: it has no results/ folder with the raw "
            f"tables (results/*.csv, results/<experiment>.done.json); {HOW_TO}"
        )
    return RunDir(root)


def _last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1].strip() if lines else "unknown error"


def _method(name: str) -> str:
    """An experiment's own account of its method: METHODS, else its docstring's first paragraph."""
    try:
        mod = experiments.load(name)
    except Exception:
        return ""
    text = getattr(mod, "METHODS", "") or (mod.__doc__ or "").strip().split("\n\n")[0]
    return " ".join(str(text).split())


def experiment_states(run: RunDir) -> list[dict[str, Any]]:
    """For each registered experiment: done / failed / not-run / absent, with reason and timing."""
    done = run.status()
    states = []
    for name in experiments.REGISTRY:
        err = run.results / f"{name}.error.txt"
        skip = run.results / f"{name}.notrun.json"
        info = done.get(name, {})
        state = {
            "name": name,
            "status": "absent",
            "reason": "not run in this run directory",
            "error": "",
            "profile": info.get("profile", ""),
            "device": info.get("device", ""),
            "world_size": info.get("world_size", ""),
            "seconds": info.get("seconds", ""),
            "commit": info.get("git", ""),
            "method": _method(name),
        }
        if name in done:
            state.update(status="done", reason="")
        elif err.exists():
            text = err.read_text(encoding="utf-8")
            state.update(status="failed", reason=f"failed: {_last_line(text)}", error=text)
        elif skip.exists():
            reason = str(json.loads(skip.read_text(encoding="utf-8")).get("reason", "not run"))
            state.update(status="not-run", reason=reason)
        states.append(state)
    return states


def read_env(run: RunDir) -> dict:
    """The run's env.json, {} where it has none."""
    path = run.root / "env.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


def run_env_table(run: RunDir) -> dict[str, pd.DataFrame]:
    """The run's GPU and commit from env.json as the summaries' RUN_ENV table (the intervals that
    hold the GPU model's between-run spread read it beside the raw tables)."""
    return {spread.RUN_ENV: spread.run_env(read_env(run))}


def declared_evidence() -> dict[str, str]:
    """Every experiment's EVIDENCE (table -> how it was obtained), one mapping."""
    out: dict[str, str] = {}
    for name in experiments.REGISTRY:
        try:
            module = experiments.load(name)
        except Exception:  # a module that does not import is recorded as its failure elsewhere
            continue
        out.update(getattr(module, "EVIDENCE", {}))
    return out


def compute_metrics(
    tables: dict[str, pd.DataFrame], states: list[dict]
) -> tuple[pd.DataFrame, dict[str, str], list[dict]]:
    """Metric rows of every done experiment by its own summarize(); not-run reasons; errors."""
    frames, not_run, errors = [], {}, []
    devices = {s["name"]: str(s.get("device") or "") for s in states}
    declared = declared_evidence()
    for s in states:
        if s["status"] != "done":
            not_run[s["name"]] = s["reason"]
            if s["error"]:
                errors.append({"where": f"experiment {s['name']}", "text": s["error"]})
            continue
        try:
            df = experiments.load(s["name"]).summarize(tables)
            df = pd.DataFrame(df).reindex(columns=experiments.METRIC_COLUMNS)
            frames.append(evidence.tag(df, tables, declared, devices))
        except Exception as e:
            not_run[s["name"]] = f"summarize failed: {type(e).__name__}: {e}"
            errors.append({"where": f"{s['name']}.summarize", "text": traceback.format_exc()})
    rows = pd.concat(frames, ignore_index=True) if frames else None
    records = [] if rows is None else rows.to_dict("records")
    metrics = experiments.metric_rows(records)
    metrics = experiments.metric_rows(records + derive(metrics))  # claims across experiments
    return metrics, not_run, errors


def ranks_notes(verdicts: list[Verdict], states: list[dict] | None = None) -> dict[str, str]:
    """Which claims rest on real, emulated or simulated ranks: the label of each verdict's
    evidence kind (suite.evidence), and of any alternative measured on real ranks beside it.
    `states` is accepted for callers of the older signature; the kinds carry the rank counts."""
    notes = {}
    for v in verdicts:
        kind = evidence.Evidence.parse(v.evidence_kind) if v.evidence_kind else None
        if kind is not None and kind.how != "measured":
            notes[v.id] = kind.label()
        real: dict[str, list[str]] = {}  # label -> alternatives measured on real ranks
        for a in v.alternatives:
            if a.get("evidence_kind", "").startswith("real") and a["metric"] != v.metric:
                real.setdefault(evidence.label(a["evidence_kind"]), []).append(a["metric"])
        if real:  # e.g. torchrun with 2 GPUs: throughput_gain_real beside the emulated value
            note = "; ".join(f"{label} in {', '.join(keys)}" for label, keys in real.items())
            notes[v.id] = f"{notes[v.id]}; {note}" if v.id in notes else note
    return notes


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", str(name)).strip("-.") or "figure"


def draw_figures(
    run: RunDir,  # where the figures go: run.figures
    tables: dict[str, pd.DataFrame],
    metrics: pd.DataFrame,
    verdicts: list[Verdict],
    gpu: str,
) -> tuple[list[dict], list[str], list[dict]]:
    """Save every figure as SVG + PNG, the opening figure (the claims at a glance, its marker
    naming `gpu`) first; returns (figures, notes on missing plots, errors).

    Each figure dict holds name, caption, experiment, title and description (describe.py, read
    from the drawn figure), the labelled SVG text, and the open matplotlib Figure ("fig") so the
    PDF can reuse it; the caller closes them.
    """
    run.figures.mkdir(parents=True, exist_ok=True)
    for old in sorted(run.figures.glob("*")):
        if old.suffix in (".svg", ".png"):
            old.unlink()
    drawn: list[tuple[str, str, str, Any]] = []
    notes, errors = [], []
    rows = claim_rows([v.to_json() for v in verdicts], gpu, "this run")
    fig = opening.figure(rows)  # first: the report opens with it
    if fig is not None:
        drawn.append((opening.NAME, opening.CAPTION, "claims", fig))
    for name in experiments.REGISTRY:
        if not any(t == name or t.startswith(f"{name}_") for t in tables):
            continue
        figs, err = plots.draw(name, tables, metrics)
        if err:
            errors.append({"where": f"{plots.PACKAGE}.{name}.figures", "text": err})
            notes.append(f"{name}: plot module failed ({_last_line(err)})")
        elif not figs:
            notes.append(f"{name}: no figures (no module {plots.PACKAGE}.{name}, or it drew none)")
        drawn += [(n, c, name, f) for n, c, f in figs]
    out, used = [], set()
    for name, caption, exp, fig in drawn:
        base = safe = _safe(name)
        i = 2
        while safe in used:
            safe, i = f"{base}-{i}", i + 1
        used.add(safe)
        try:
            buf = io.StringIO()
            fig.savefig(buf, format="svg", metadata={"Date": None})  # drawn: tick labels exist
            heading, text = describe.title(fig, caption) or safe, describe.describe(fig)
            svg = describe.label_svg(buf.getvalue(), f"fig-{safe}", heading, text)
            atomic_write_text(run.figures / f"{safe}.svg", svg)
            fig.savefig(run.figures / f"{safe}.png", format="png")
        except Exception:
            errors.append(
                {"where": f"saving figure {safe} ({exp})", "text": traceback.format_exc()}
            )
            notes.append(f"{exp}: figure {safe} could not be saved")
            plt.close(fig)
            continue
        out.append(
            {
                "name": safe,
                "caption": str(caption),
                "experiment": exp,
                "fig": fig,
                "title": heading,
                "description": text,
                "svg": svg,
            }
        )
    return out, notes, errors


def build_report(run_dir: Path | str) -> BuildResult:
    """Recompute everything derived in `run_dir` from its raw tables; write the report files
    (OUTPUTS) as one unit: all of them rebuilt, or (on an error or a signal) none touched."""
    run = open_run(run_dir)
    stage = run.root / STAGING
    shutil.rmtree(stage, ignore_errors=True)  # what a build killed outright left
    stage.mkdir()
    try:
        result = _build(run, stage)
        with held():
            for name in OUTPUTS:
                if (run.root / name).is_dir():  # os.replace cannot replace a folder
                    os.replace(run.root / name, stage / f"old-{name}")
                os.replace(stage / name, run.root / name)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return result


def _build(run: RunDir, stage: Path) -> BuildResult:
    """build_report's work, its outputs written into `stage`."""
    env = read_env(run)
    tables = run.tables()
    states = experiment_states(run)
    metrics, not_run, errors = compute_metrics(tables | run_env_table(run), states)
    atomic_write_text(stage / "metrics.csv", metrics.to_csv(index=False, lineterminator="\n"))
    verdicts = evaluate(metrics, not_run)
    notes = ranks_notes(verdicts, states)
    claims_json = []
    for v in verdicts:
        d = v.to_json()
        d["ranks"] = notes.get(v.id, "")
        claims_json.append(d)
    write_json(stage / "claims.json", claims_json)

    with mpl.rc_context(plots.RC):
        gpu = gpu_name(env)
        figs, plot_notes, plot_errors = draw_figures(RunDir(stage), tables, metrics, verdicts, gpu)
        try:
            context = _context(
                run, env, states, tables, verdicts, figs, plot_notes, errors + plot_errors, notes
            ) | _shown(figs)
            context["beyond"] = beyond.section(tables, metrics)
            context["cost_forms"] = beyond.cost_forms(tables)
            atomic_write_text(stage / "report.html", html.render(context))
            pdf.write_pdf(
                stage / "report.pdf",
                context["claims"],
                context["subtitle"],
                context["summary_text"],
                [(f["name"], f["caption"], f["fig"]) for f in figs],  # the opening one first
                context["beyond"],
                context["cost_forms"],
            )
        finally:
            for f in figs:
                plt.close(f["fig"])
    return BuildResult(
        run.root,
        verdicts,
        metrics,
        [f["name"] for f in figs],
        errors + plot_errors,
        context["claims"],
    )


def _shown(figs: list[dict]) -> dict[str, Any]:
    """The figures as the HTML shows them (inline SVG, labelled when drawn): the opening figure
    heads the summary; the Figures section holds the rest."""
    shown = [{**f, "svg": html.inline_svg(f["svg"])} for f in figs]
    return {
        "opening": next((f for f in shown if f["name"] == opening.NAME), None),
        "figures": [f for f in shown if f["name"] != opening.NAME],
    }


def _context(
    run: RunDir,
    env: dict,
    states: list[dict],
    tables: dict[str, pd.DataFrame],
    verdicts: list[Verdict],
    figs: list[dict],
    plot_notes: list[str],
    errors: list[dict],
    ranks: dict[str, str],
) -> dict[str, Any]:
    claims = load_claims()
    figures_of: dict[str, list[str]] = {}
    for f in figs:
        figures_of.setdefault(f["experiment"], []).append(f["name"])
    git = env.get("git") if isinstance(env.get("git"), dict) else {}
    torch_info = env.get("torch") if isinstance(env.get("torch"), dict) else {}
    device = torch_info.get("device_name") or "no CUDA GPU"
    rows = html.claim_rows(verdicts, claims, figures_of, ranks)
    names = [*html.COLOURS, *sorted({v.verdict for v in verdicts} - set(html.COLOURS))]
    counts = [(k, sum(v.verdict == k for v in verdicts)) for k in names]
    profile = str(env.get("profile", "") or "unknown")
    timestamp = str(env.get("timestamp", "") or "unknown (env.json missing)")
    sha = str(git.get("sha", "unknown"))[:12]
    by_id = {c.id: c for c in claims}
    # named from env.json, not the folder, so a run copied elsewhere rebuilds to the same bytes
    run_name = f"{timestamp.replace(':', '')}-{profile}" if env else "unknown"
    rank_groups = {}
    for cid, note in sorted(ranks.items(), key=lambda kv: int(kv[0][1:])):
        rank_groups.setdefault(note, []).append(cid)
    return {
        "rank_groups": sorted(rank_groups.items()),
        "run_name": run_name,
        "profile": profile,
        "timestamp": timestamp,
        "git_sha": sha,
        "git_dirty": bool(git.get("dirty")),
        # experiments of a resumed run done at other commits than env.json's (run start)
        "other_commits": sorted(
            {c for e in states for c in str(e["commit"]).split(", ") if c}
            - {sha, sha + "+dirty", "unknown"}
        ),
        "device": device,
        "subtitle": f"run {run_name} · {timestamp} · git {sha}"
        f"{' (dirty)' if git.get('dirty') else ''} · {device}",
        "counts": [(k, n) for k, n in counts if n],
        "claims": rows,
        "summary_text": summary_text(rows, profile, device, len(claims)),
        "gpu_evidence": any(evidence.on_gpu(v.evidence_kind) for v in verdicts),
        "env_rows": html.flatten(env) if env else [("env.json", "missing")],
        "choices": html.CHOICES,
        "experiments": states,
        "plot_notes": plot_notes,
        "not_run": [
            {
                "id": r["id"],
                "claim": r["claim"],
                "experiment": r["experiment"],
                "hardware": by_id[r["id"]].hardware,
                "reason": r["reason"],
            }
            for r in rows
            if r["verdict"] == "not-run"
        ],
        "errors": errors,
        "tables": [
            {
                "name": n,
                "file": run.table_path(n).name,
                "rows": len(df),
                "columns": ", ".join(map(str, df.columns)),
            }
            for n, df in sorted(tables.items())
        ],
        "table_names": set(tables),
        "table_files": {n: run.table_path(n).name for n in tables},
        "figure_names": {f["name"] for f in figs},
        "has_metrics": True,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m suite report",
        description="Rebuild metrics.csv, claims.json, figures/, "
        "report.html and report.pdf of a run directory from its raw "
        "tables alone (byte-identical for the same tables).",
    )
    p.add_argument("run_dir", type=Path, help="a run directory written by `reproduce`")
    args = p.parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        with stop_on_signals():
            run = open_run(args.run_dir)
            writable_dir(run.root, "RUN_DIR")
            with lock(run.root):
                result = build_report(run.root)
    except (NotARunDir, UsageError, TableError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        print(
            f"\ninterrupted: the report files of {args.run_dir} are as they were", file=sys.stderr
        )
        return exit_code(e)
    counts: dict[str, int] = {}
    for v in result.verdicts:
        counts[v.verdict] = counts.get(v.verdict, 0) + 1
    summary = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
    print(f"{result.run_dir / 'report.html'}: {summary}; {len(result.figures)} figures")
    for e in result.errors:
        print(f"  error in {e['where']}: {_last_line(e['text'])}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
