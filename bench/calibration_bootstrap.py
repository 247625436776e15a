"""The ECE/MCE interval above 10,000 clusters: the approximate bootstrap against the exact one.

    python -m bench.calibration_bootstrap [--clusters 12000 30000] [--seeds 3]

For synthetic yes/no-like data (3 rows a cluster; a thin bin [0, 0.1) of 40 clusters and a bin
of 1,100 clusters just above the thin bound, the hardest cases for the normal part) it prints,
per cluster count, the exact cluster bootstrap's interval ends (2,000 resamples, as the report),
how far a second exact bootstrap with another seed lands from them (Monte Carlo error), how far
the approximation (`analysis/calibration_bootstrap.py`, method "normal-bins") lands, both as a
share of the exact interval's width, and the CPU seconds of each.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from llmscope.analysis.calibration_bootstrap import calibration_bootstrap


def data(
    G: int, seed: int, per: int = 3, thin: int = 40, mid: int = 1100
) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    conf = np.clip(
        np.repeat(rng.random(G), per) * 0.5 + 0.5 + rng.normal(0, 0.05, G * per), 0.5, 1.0
    )
    corr = (rng.random(G * per) < conf - 0.1 * np.repeat(rng.random(G) < 0.5, per)).astype(float)
    conf[: thin * per] = rng.uniform(0.0, 0.1, thin * per)
    corr[: thin * per] = rng.random(thin * per) < 0.6
    s = slice(thin * per, (thin + mid) * per)
    conf[s] = rng.uniform(0.3, 0.4, mid * per)
    corr[s] = rng.random(mid * per) < 0.5
    return conf, corr, np.repeat(np.arange(G), per)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--clusters", type=int, nargs="+", default=[12_000, 30_000])
    ap.add_argument("--seeds", type=int, default=3, help="data sets per cluster count")
    args = ap.parse_args(argv)
    worst = {"exact": 0.0, "approx": 0.0}
    for G in args.clusters:
        for d in range(args.seeds):
            conf, corr, cl = data(G, seed=d + 1)
            c0 = time.process_time()
            ex = calibration_bootstrap(conf, corr, cl, 10, 2000, 0, 0.95, method="exact")
            t_ex = time.process_time() - c0
            ex1 = calibration_bootstrap(conf, corr, cl, 10, 2000, 1, 0.95, method="exact")
            c0 = time.process_time()
            ap_ = calibration_bootstrap(conf, corr, cl, 10, 2000, 0, 0.95, method="normal-bins")
            t_ap = time.process_time() - c0
            for key in ("ece", "mce"):
                e, e1, a = getattr(ex, key), getattr(ex1, key), getattr(ap_, key)
                w = e[1] - e[0]
                de = max(abs(e1[0] - e[0]), abs(e1[1] - e[1])) / w
                da = max(abs(a[0] - e[0]), abs(a[1] - e[1])) / w
                worst["exact"], worst["approx"] = max(worst["exact"], de), max(worst["approx"], da)
                print(
                    f"G={G:,} data {d + 1} {key}: exact [{e[0]:.5f}, {e[1]:.5f}]; ends moved, share of width: "
                    f"exact seed 1 {de:.3f}, approximation {da:.3f}"
                )
            print(f"  CPU s: exact {t_ex:.2f}, approximation {t_ap:.3f}")
    print(
        f"largest end difference, share of the exact interval's width: another exact seed {worst['exact']:.3f}, "
        f"approximation {worst['approx']:.3f} (test tolerance 0.12)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
