"""Download every wheel the suite needs, except torch, for an air-gapped GPU node.

    python -m suite.wheelhouse --python 3.12 --platform manylinux_2_28_x86_64 [--dest wheelhouse]

On the node (which already has torch):
    pip install --no-index --find-links wheelhouse 'adaptiveload-suite[reproduce]'
    python -m nox --no-venv --no-install -s reproduce
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXCLUDE = {"torch"}  # the node has its own (CUDA) build; never ship a second one
# manylinux tags are matched exactly by pip: offer the older ones a newer glibc also accepts
OLDER_TAGS = ["manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux_2_27_x86_64"]


EXTRA = "test"  # reproduce's and the test suite's requirements (it names the others it needs)


def requirements(extra: str = EXTRA) -> list[str]:
    """The base requirements and `extra`'s, the suite's own extras it names expanded in place."""
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs, todo, seen = list(meta["dependencies"]), [extra], set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for r in meta["optional-dependencies"][name]:
            if r.startswith(meta["name"] + "["):  # "adaptiveload-suite[ops,parquet]"
                todo += r[r.index("[") + 1 : r.index("]")].split(",")
            else:
                reqs.append(r)
    return [r for r in reqs if _name(r) not in EXCLUDE]


def _name(req: str) -> str:
    for sep in "[<>=!~;":
        req = req.split(sep)[0]
    return req.strip()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="nox -s wheelhouse --",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument(
        "--python",
        default=f"{sys.version_info.major}.{sys.version_info.minor}",
        help="the node's Python version, e.g. 3.12",
    )
    ap.add_argument("--platform", default="manylinux_2_28_x86_64", help="the node's wheel tag")
    ap.add_argument("--dest", default="wheelhouse", type=Path, help="folder to fill")
    args = ap.parse_args(argv)
    args.dest.mkdir(parents=True, exist_ok=True)
    platforms = [args.platform] + [t for t in OLDER_TAGS if t != args.platform]
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--only-binary=:all:",
        "--implementation",
        "cp",
        "--python-version",
        args.python,
        "-d",
        str(args.dest),
    ]
    for tag in platforms:
        cmd += ["--platform", tag]
    # torch is excluded by name; a dependency that pulls torch in would fail loudly here
    cmd += requirements()
    print("+", " ".join(cmd))
    if subprocess.call(cmd) != 0:
        return 1
    # the suite itself, so the node needs no build backend
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(args.dest), str(ROOT)]
    print("+", " ".join(build))
    if subprocess.call(build) != 0:
        return 1
    wheels = sorted(p.name for p in args.dest.glob("*.whl"))
    if any(w.startswith("torch-") for w in wheels):
        print("error: a torch wheel was downloaded; remove it", file=sys.stderr)
        return 1
    print(f"{len(wheels)} wheels in {args.dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
