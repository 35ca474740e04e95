"""docs/statistics.md's noise model written a second time, for the tests that recompute a result set's or a compare's
intervals by hand: loops, a dict per cell and scipy.optimize.brentq where attnprof.analysis.stats vectorises and uses
Newton's method (the same definitions, another path)."""
import math

from scipy import optimize, special
from scipy import stats as st


def _corrected(var: float, df: float) -> float:
    """A log variance, corrected for its chi-square bias (Smyth 2004, sec. 6.2)."""
    return math.log(max(var, 1e-10)) - special.digamma(df / 2) + math.log(df / 2)


def moderated(cells: dict, groups: dict) -> dict:
    """{cell: (variance, df)} after moderation. cells: {cell: (sample variance, df)}; groups: {cell: label}. Each
    cell's prior comes from the *other* cells: their mean corrected log variance within its group where at least 2
    others share it (and 3 residual df remain), else over all others; the prior df d0 from the residual spread
    beyond the mean trigamma (capped at the others' total df); a cell beyond its prior at 1 % keeps its own."""
    used = {k: v for k, v in cells.items() if v[1] > 0}
    if len(used) < 4:
        return dict(cells)
    out = {}
    for k, (var, df) in cells.items():
        others = {j: used[j] for j in used if j != k}
        e = {j: _corrected(*others[j]) for j in others}
        mine = [j for j in others if groups[j] == groups[k]]
        labels = {groups[j] for j in others}
        means = {g: sum(e[j] for j in others if groups[j] == g) / sum(groups[j] == g for j in others) for g in labels}
        dof = len(others) - len(labels)
        if len(mine) >= 2 and dof >= 3:
            loc = means[groups[k]]
            spread = sum((e[j] - means[groups[j]]) ** 2 for j in others) / dof
        else:
            loc = sum(e.values()) / len(e)
            spread = sum((x - loc) ** 2 for x in e.values()) / (len(e) - 1)
        spread -= sum(special.polygamma(1, others[j][1] / 2) for j in others) / len(others)
        cap = sum(d for _, d in others.values())
        d0 = cap if spread <= 0 else min(2 * optimize.brentq(lambda x: special.polygamma(1, x) - spread, 1e-8, 1e8), cap)
        prior = math.exp(loc + special.digamma(d0 / 2) - math.log(d0 / 2))
        if df > 0 and st.f.sf(max(var, 1e-10) / prior, df, d0) < 0.01:
            d0 = 0.0
        out[k] = ((d0 * prior + df * max(var, 1e-10) * (df > 0)) / (d0 + df), d0 + df)
    return out
