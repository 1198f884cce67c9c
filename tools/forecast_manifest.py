"""Write a seeded synthetic manifest of the kind a practitioner brings to `suite forecast`.

    PYTHONPATH=. python tools/forecast_manifest.py [--samples 5000] [--seed 0] [--out FILE.csv]

Columns height, width, frames (suite.data.manifest's CSV format). The mix: 40% images, 60%
clips; each at 480p (480x832) or 720p (720x1280), 70% / 30%; a clip's frames uniform over
17, 21, ..., 81 (1 + 4k, Wan 2.1's VAE stride). At Wan 2.1's latent geometry
(suite.data.geometry) that is 1,560 to 75,600 tokens a sample.
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

RESOLUTIONS = np.array([[480, 832], [720, 1280]])  # (height, width)
RESOLUTION_SHARE = (0.7, 0.3)
IMAGE_SHARE = 0.4
CLIP_FRAMES = np.arange(17, 82, 4)  # 17, 21, ..., 81


def manifest(samples: int, seed: int) -> pd.DataFrame:
    """`samples` rows of height, width, frames drawn from the module doc's mix."""
    rng = np.random.default_rng(seed)
    hw = RESOLUTIONS[rng.choice(len(RESOLUTIONS), samples, p=RESOLUTION_SHARE)]
    frames = np.where(rng.random(samples) < IMAGE_SHARE, 1, rng.choice(CLIP_FRAMES, samples))
    return pd.DataFrame({"height": hw[:, 0], "width": hw[:, 1], "frames": frames})


MAX_SAMPLES = 10_000_000  # ~150 MB of CSV and a few seconds; a forecast needs far fewer


def main(argv: list[str] | None = None) -> int:
    from suite.cli_args import check_writable, whole

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=whole(1, MAX_SAMPLES), default=5000)
    ap.add_argument("--seed", type=whole(0), default=0)
    ap.add_argument("--out", default="forecast_manifest.csv")
    a = ap.parse_args(argv)
    try:
        check_writable(a.out, "--out", (".csv",))
    except ValueError as e:
        ap.error(str(e))
    manifest(a.samples, a.seed).to_csv(a.out, index=False)
    print(f"wrote {a.out} ({a.samples} samples, seed {a.seed})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
