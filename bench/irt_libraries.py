"""Which IRT library llmscope fits with: mirt and girth on simulated data with known parameters.

`python -m bench.irt_libraries` simulates 2PL and Rasch data (abilities N(0, 1), difficulties
N(0, 1), discriminations lognormal(0, 0.3) or 1) in three shapes, from many respondents to the
few-models-many-items shape of model comparisons, fits each with both libraries, and prints the
root mean square error of each parameter against the truth, the share of true difficulties inside
mirt's 95% intervals (girth gives none) and the seconds per fit. Needs `pip install -e '.[bench,irt]'`.
"""

from __future__ import annotations

import time
import warnings

import numpy as np

SHAPES = ((1000, 20), (200, 50), (40, 200))


def simulate(
    n_p: int, n_i: int, seed: int, rasch: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = np.ones(n_i) if rasch else rng.lognormal(0, 0.3, n_i)
    b = rng.normal(0, 1, n_i)
    th = rng.normal(0, 1, n_p)
    p = 1 / (1 + np.exp(-a[None, :] * (th[:, None] - b[None, :])))
    return (rng.random((n_p, n_i)) < p).astype(int), a, b, th


def _rmse(x: object, y: np.ndarray) -> float:
    return float(np.sqrt(np.mean((np.asarray(x, dtype=float) - y) ** 2)))


def main(seeds: int = 3) -> None:
    import girth
    import mirt

    warnings.simplefilter("ignore")
    print(
        f"{'shape':>8} {'model':5} {'library':7} {'a_rmse':>7} {'b_rmse':>7} {'theta_rmse':>10} {'b_cov95':>7} {'s/fit':>6}"
    )
    for n_p, n_i in SHAPES:
        for model in ("1PL", "2PL"):
            res: dict[str, list[tuple[float, ...]]] = {"mirt": [], "girth": []}
            for seed in range(seeds):
                x, a, b, th = simulate(n_p, n_i, seed, rasch=model == "1PL")
                t = time.perf_counter()
                r = mirt.fit_mirt(x.astype(float), model=model)
                tm = time.perf_counter() - t
                c, ci = r.coef(), r.confidence_intervals()
                thm = np.asarray(mirt.fscores(r, x.astype(float)).theta).ravel()
                cov = float(np.mean((ci["difficulty"][0] <= b) & (b <= ci["difficulty"][1])))
                res["mirt"].append(
                    (
                        _rmse(c["discrimination"], a),
                        _rmse(c["difficulty"], b),
                        _rmse(thm, th),
                        cov,
                        tm,
                    )
                )
                t = time.perf_counter()
                g = girth.twopl_mml(x.T) if model == "2PL" else girth.rasch_mml(x.T)
                tg = time.perf_counter() - t
                ga = np.broadcast_to(g.get("Discrimination", 1.0), a.shape)
                thg = girth.ability_eap(x.T, g["Difficulty"], ga)
                res["girth"].append(
                    (_rmse(ga, a), _rmse(g["Difficulty"], b), _rmse(thg, th), float("nan"), tg)
                )
            for lib, vals in res.items():
                m = np.mean(np.array(vals), axis=0)
                print(
                    f"{n_p:>4}x{n_i:<4} {model:5} {lib:7} {m[0]:7.3f} {m[1]:7.3f} {m[2]:10.3f} {m[3]:7.2f} {m[4]:6.2f}"
                )


if __name__ == "__main__":
    main()
