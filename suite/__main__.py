"""`adaptiveload <command> ...` (the console command an install puts on PATH), the same as
`python -m suite <command> ...`: one entry point, each command implemented in its own module.

Each target is "module:function"; the function takes the remaining argv (list[str]) and returns
an exit code. `python -m suite <command> --help` explains each command.
"""

from __future__ import annotations

import importlib
import sys

from suite.stopping import exit_code, exit_now, stop_on_signals

COMMANDS: dict[str, tuple[str, str]] = {
    "reproduce": ("suite.reproduce:main", "run every experiment and write the report"),
    "report": ("suite.report.build:main", "rebuild figures, HTML and PDF from a run directory"),
    "fit-cost": (
        "suite.balance.fit_cost_cli:fit_cost_main",
        "shape-benchmark sweep + cost-model fit",
    ),
    "simulate": ("suite.balance.cli:simulate_main", "simulate R ranks under a batching policy"),
    "forecast": ("suite.balance.cli:forecast_main", "forecast balance metrics for your data"),
}


def version() -> str:
    """The installed distribution's version, else the source tree's (the same number: pyproject
    reads it from suite.__version__)."""
    from importlib import metadata

    try:
        return metadata.version("adaptiveload-suite")
    except metadata.PackageNotFoundError:
        from suite import __version__

        return f"{__version__} (source tree, not installed)"


def usage() -> str:
    lines = [
        "usage: adaptiveload <command> [options]",
        "       python -m suite <command> [options]   (the same, without the console command)",
        "       adaptiveload --version",
        "",
        "commands:",
    ]
    lines += [f"  {name:<10} {help_}" for name, (_, help_) in COMMANDS.items()]
    lines += ["", "Run `adaptiveload <command> --help` for a command's options."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0
    if argv[0] in ("-V", "--version"):
        print(f"adaptiveload-suite {version()}")
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"error: unknown command {name!r}\n\n{usage()}", file=sys.stderr)
        return 2
    module, func = COMMANDS[name][0].split(":")
    try:
        with stop_on_signals():  # from the import on (seconds with torch): suite.stopping
            try:
                entry = getattr(importlib.import_module(module), func)
            except ModuleNotFoundError as e:  # a base install (the ops alone) lacks the stack
                if str(e.name).partition(".")[0] == "suite":
                    raise  # the suite's own module: a bug, not an install
                print(
                    f"error: {name} needs {e.name!r}, which is not installed: "
                    "pip install 'adaptiveload-suite[reproduce]' (docs/install.md)",
                    file=sys.stderr,
                )
                return 2
            return int(entry(rest) or 0)
    except KeyboardInterrupt as e:
        print(f"\n{name}: interrupted", file=sys.stderr)
        return exit_code(e)


if __name__ == "__main__":
    code = main()
    exit_now(code)  # stopped by SIGINT/SIGTERM: skip the interpreter's teardown (suite.stopping)
    sys.exit(code)
