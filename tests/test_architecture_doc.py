"""docs/architecture.md names only what exists: every backticked path, module and
`python -m suite <command>` it mentions is in the tree, so a move or rename that leaves the page
behind fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from suite.__main__ import COMMANDS

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
TOP = ("suite/", "kernels/", "lab/", "tools/", "tests/", "docs/", "benchmarks/", "reports/")
SEARCHED = ("suite", "lab", "tools")  # where a bare file name (`runs.py`) must exist
CODE_SUFFIXES = (".py", ".cu", ".cuh", ".csv", ".md", ".j2")

SPANS = re.findall(r"`([^`\n]+)`", DOC)
TOKENS = sorted({tok.strip("(),;:") for span in SPANS for tok in span.split()})
PATHS = [t for t in TOKENS if t.startswith(TOP) and "<" not in t]
BARE_FILES = [t for t in TOKENS if "/" not in t and t.endswith(CODE_SUFFIXES)]
MODULES = sorted(set(re.findall(r"\b(suite(?:\.\w+)+)", DOC)))
COMMANDS_NAMED = sorted(set(re.findall(r"python -m suite (\w[\w-]*)", DOC)))


def _exists(path: str) -> bool:
    if any(c in path for c in "*?["):
        return any(ROOT.glob(path))
    return (ROOT / path).exists()


def _module_file(dotted: str) -> Path | None:
    """The file of the longest prefix of `dotted` that is a module of the tree, else None."""
    parts = dotted.split(".")
    for n in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:n])
        for f in (base.with_suffix(".py"), base / "__init__.py"):
            if f.is_file():
                return f
    return None


def test_the_page_names_things_to_check():
    assert len(PATHS) > 30 and len(MODULES) > 3 and len(COMMANDS_NAMED) >= 5


@pytest.mark.parametrize("path", PATHS)
def test_named_path_exists(path):
    assert _exists(path), f"docs/architecture.md names {path}, which is not in the tree"


@pytest.mark.parametrize("name", BARE_FILES)
def test_named_file_exists_somewhere(name):
    assert any(any((ROOT / d).rglob(name)) for d in SEARCHED), f"no {name} under {SEARCHED}"


def _resolves(dotted: str) -> bool:
    """`suite.a.b` is a module, or a module and a name it defines (`suite.claims.claims_of`)."""
    f = _module_file(dotted)
    if f is None:
        return False
    rel = f.relative_to(ROOT).with_suffix("")
    module = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
    rest = dotted.removeprefix(module).strip(".")
    if not rest:
        return True
    name = rest.split(".")[0]
    defines = rf"^(?:def|class)\s+{name}\b|^{name}\s*[:=]|^\s*from .* import .*\b{name}\b"
    return re.search(defines, f.read_text(encoding="utf-8"), flags=re.M) is not None


@pytest.mark.parametrize("dotted", MODULES)
def test_named_module_and_attribute_exist(dotted):
    assert _resolves(dotted), f"docs/architecture.md names {dotted}, which is not in the tree"


@pytest.mark.parametrize("command", COMMANDS_NAMED)
def test_named_command_exists(command):
    assert command in COMMANDS, f"python -m suite {command}: not one of {sorted(COMMANDS)}"


def test_every_command_is_named():
    """The page lists the whole command set, not a stale subset."""
    assert set(COMMANDS) <= set(COMMANDS_NAMED)


def test_the_checks_catch_a_missing_path():
    assert not _exists("suite/ops/no_such_module.py") and _exists("kernels/*.cu")
    assert not _resolves("suite.no_such_package") and not _resolves("suite.claims.no_such_name")
    assert _resolves("suite.claims.claims_of") and _resolves("suite.experiments.kernels")
