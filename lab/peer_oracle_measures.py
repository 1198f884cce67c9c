"""The numbers the peer ports changed, measured: LPT item by item against LPT in rounds, KK's
load vectors against verl's before and after the tie-break, and KnapFormer's gamma by its own
procedure against the suite's former fit (both under the default cost).

    PYTHONPATH=. python lab/peer_oracle_measures.py [--before 5565467]

`--before` names the commit whose global_policy.py and peers_dit.py are "before".
"""

import argparse
import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from suite.balance.buckets import bucket_table
from suite.balance.costmodel import default_cost_model
from suite.balance.global_policy import greedy_partition, kk_partition, lpt_partition
from suite.balance.peers_dit import KnapFormerBags
from suite.data.corpus import sample_corpus
from tests.oracles.verl_kk import karmarkar_karp


def module_at(commit: str, path: str, name: str):
    """A module of the repository as it was at `commit`."""
    src = subprocess.run(["git", "show", f"{commit}:{path}"], capture_output=True, text=True)
    if src.returncode:
        sys.exit(f"--before: git show {commit}:{path} failed: {src.stderr.strip()}")
    file = Path(tempfile.mkdtemp()) / f"{name}.py"
    file.write_text(src.stdout)
    spec = importlib.util.spec_from_file_location(name, file)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", default="5565467")
    before = ap.parse_args().before
    old_gp = module_at(before, "suite/balance/global_policy.py", "gp_before")
    old_pd = module_at(before, "suite/balance/peers_dit.py", "pd_before")
    cost = default_cost_model()
    tok = sample_corpus(20000, seed=0).tokens.to_numpy()
    rng = np.random.default_rng(0)
    for R in (16, 64, 1024):
        g, r = [], []
        for _ in range(20):
            c = cost.sample_cost(rng.choice(tok, 10 * R))
            g.append(greedy_partition(c, R)[1].max() * R / c.sum())
            r.append(lpt_partition(c, R)[1].max() * R / c.sum())
        print(f"{R} ranks, 10 items a rank: max/mean in rounds {np.mean(r):.4f}, "
              f"item by item {np.mean(g):.4f}")  # fmt: skip
    rng = np.random.default_rng(5)
    n_old = n_new = 0
    for _ in range(400):
        R = int(rng.choice([2, 3, 4, 8, 16, 32]))
        n, top = int(rng.integers(R, 12 * R)), int(rng.choice([2, 3, 5, 20]))
        c = rng.integers(1, top + 1, n).astype(float)
        ref = np.sort([c[p].sum() for p in karmarkar_karp(c.tolist(), R, False)])
        n_old += not np.array_equal(np.sort(old_gp.kk_partition(c, R)[1]), ref)
        n_new += not np.array_equal(np.sort(kk_partition(c, R)[1]), ref)
    print(
        f"KK load vectors unlike verl's, 400 tie-heavy integer cases: {n_old} before, {n_new} now"
    )
    b = bucket_table(tok)
    print(f"KnapFormer gamma, default cost: former fit {old_pd.KnapFormerBags.fit(cost, b, cost.m_mem).gamma:.4g}, "
          f"KnapFormer's procedure {KnapFormerBags.fit(cost, b, cost.m_mem).gamma:.4g}")  # fmt: skip


if __name__ == "__main__":
    main()
