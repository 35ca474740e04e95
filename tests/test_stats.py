"""attnprof.analysis.stats: the noise model (moderated variances), the rerun interval, host ranges and the sitting
bound, against independent arithmetic and against data with a known answer (simulated repeats, fixed seeds:
deterministic). The verdict rule itself is tested in tests/test_verdict.py."""
import math
import statistics

import numpy as np
import pytest
from scipy import stats as st

from attnprof.analysis.stats import MEDIAN_VARIANCE, Noise, between_run_interval, host_range, moderated_noise, squeeze_var
from attnprof.analysis.verdict import KEEP_OWN_P, compare_ratio


def test_interval_worked_by_hand():
    m = [1.00, 1.02, 0.97]  # median 1.00, mean 0.9967: they differ, so a mix-up of the two shows
    r = between_run_interval(m)
    logs = [math.log(x) for x in m]
    mean, sd = statistics.fmean(logs), statistics.stdev(logs)
    half = 4.302652729749464 * sd * math.sqrt((1 + math.pi / 2) / 3)  # t_{0.975, 2} from a table
    assert r["n"] == 3 and r["center"] == 1.00 and r["rel_sd"] == pytest.approx(sd) and r["df"] == 2
    assert r["lo"] == pytest.approx(math.exp(mean - half)) and r["hi"] == pytest.approx(math.exp(mean + half))
    # with a pooled noise of 20 df the multiplier is t_{0.975, 20} = 2.086 (a table), the sd the pool's
    p = between_run_interval(m, noise=Noise(0.01, 20))
    assert p["hi"] == pytest.approx(math.exp(mean + 2.085963447265837 * 0.01 * math.sqrt((1 + math.pi / 2) / 3)))
    assert p["df"] == 20 and p["rel_sd"] == 0.01


def test_even_count_states_the_mean_of_the_middle_two_and_one_repeat_has_no_interval():
    assert between_run_interval([4.0, 1.0, 2.0, 3.0])["center"] == 2.5
    assert between_run_interval([2.0, float("nan"), None]) == {"n": 1, "center": 2.0, "lo": None, "hi": None, "rel_sd": None,
                                                               "df": None}
    assert between_run_interval([])["center"] is None
    # one repeat, but a pooled noise: it has an interval
    assert between_run_interval([2.0], noise=Noise(0.01, 10))["lo"] < 2.0
    for bad in ([1.0, 0.0], [1.0, -2.0], [1.0, math.inf]):
        with pytest.raises(ValueError, match="positive"):
            between_run_interval(bad)


@pytest.mark.parametrize("n", [2, 3, 5, 10])
def test_a_rerun_median_falls_inside_the_interval_95_percent_of_the_time(n):
    """Known answer: repeat medians drawn log-normally (2 % between runs); the stated interval must hold the
    median of an independent rerun with as many repeats in 95 % of trials (binomial 3-sigma band of 3000)."""
    rng = np.random.default_rng(n)
    hits = 0
    trials = 3000
    for _ in range(trials):
        first, rerun = np.exp(rng.normal(0, 0.02, n)), np.exp(rng.normal(0, 0.02, n))
        r = between_run_interval(list(first))
        hits += r["lo"] <= float(np.median(rerun)) <= r["hi"]
    band = 3 * math.sqrt(0.95 * 0.05 / trials)
    assert 0.95 - band <= hits / trials <= 0.95 + band + 0.01, hits / trials
    assert MEDIAN_VARIANCE == pytest.approx(math.pi / 2)


def test_moderated_interval_keeps_its_level_and_is_narrower():
    """Known answer: 6 shapes of one variant, 3 repeats each, 1 % between runs (each shape its own mean): the
    moderated interval (the prior's df added) holds a rerun's median 95 % of the time, and is narrower than a
    cell's own (2 df)."""
    rng = np.random.default_rng(5)
    hits = own_width = moderated_width = 0
    trials = 1500
    for _ in range(trials):
        cells = {k: list(k * np.exp(rng.normal(0, 0.01, 3))) for k in range(1, 7)}
        noise = moderated_noise(cells)
        assert noise[1].df >= 2  # the prior's df added, or the cell's own 2 where it lies beyond its prior at 1 % (stats.OUTLIER_P)
        r = between_run_interval(cells[1], noise=noise[1])
        hits += r["lo"] <= float(np.median(np.exp(rng.normal(0, 0.01, 3)))) <= r["hi"]
        moderated_width += r["hi"] / r["lo"]
        own = between_run_interval(cells[1])
        own_width += own["hi"] / own["lo"]
    band = 3 * math.sqrt(0.95 * 0.05 / trials)
    assert abs(hits / trials - 0.95) <= band, hits / trials
    assert moderated_width < own_width


def _prior_by_brentq(var, df):
    """limma's prior (s0**2, d0) fitted over the rows ``var``/``df``, by another path: d0 solves trigamma(d0/2) = the
    excess spread of the corrected log variances with scipy.optimize.brentq (the code uses Newton's method)."""
    from scipy import optimize, special

    e = np.log(var) - special.digamma(df / 2) + np.log(df / 2)
    excess = np.var(e, ddof=1) - np.mean(special.polygamma(1, df / 2))
    d0 = 2 * optimize.brentq(lambda x: special.polygamma(1, x) - excess, 1e-6, 1e6)
    return math.exp(e.mean() + special.digamma(d0 / 2) - math.log(d0 / 2)), d0


def test_squeeze_var_worked_by_another_path_and_a_two_mode_cell_is_not_swallowed():
    """Eight cells' variances with 2 df each, spread beyond chance: each cell's posterior is (d0 s0**2 + 2 s**2) /
    (d0 + 2) with the prior of the *other seven* cells found by another root finder; equal variances give the others'
    total df and one posterior for all; a cell 100x the others' variance keeps most of its own."""
    var = np.array([1.0, 40.0, 0.05, 2.0, 900.0, 0.3, 15.0, 0.01]) * 1e-5
    df = np.full(8, 2.0)
    post, post_df = squeeze_var(var, df)
    for i in (0, 4, 7):
        s0, d0 = _prior_by_brentq(np.delete(var, i), np.delete(df, i))
        assert 0 < d0 < 14 and post_df[i] == pytest.approx(d0 + 2, rel=1e-6)
        assert post[i] == pytest.approx((d0 * s0 + 2 * var[i]) / (d0 + 2), rel=1e-6)
    same, same_df = squeeze_var(np.full(8, 1e-5), df)  # no spread beyond chance: the others' total df, one prior
    assert same_df == pytest.approx(14 + 2) and np.ptp(same) == pytest.approx(0.0)
    wild = np.array([1e-5, 1.2e-5, 0.8e-5, 1.1e-5, 0.9e-5, 1e-5, 1.05e-5, 1e-3])
    post, _ = squeeze_var(wild, df)
    assert post[-1] > 10 * post[0]  # the two-mode cell is not narrowed to its quiet neighbours
    # fewer than 4 rows: each its own
    assert squeeze_var(var[:3], df[:3])[0] == pytest.approx(var[:3])


def test_the_verdicts_squeeze_keeps_a_row_above_its_priors_median_and_widens_one_below():
    """The verdict's moderation (outlier_p = verdict.KEEP_OWN_P = 0.5), worked by another path: with the prior of the
    *other seven* cells found by another root finder, a cell whose own variance lies below its prior's median
    predictive (upper tail of F(2, d0) at least 0.5) gets (d0 s0**2 + 2 s**2) / (d0 + 2) with d0 + 2 df, one above
    keeps its own with 2 df; a cell far below its neighbours is widened toward them."""
    assert KEEP_OWN_P == 0.5
    var = np.array([1.0, 40.0, 0.05, 2.0, 900.0, 0.3, 15.0, 0.01]) * 1e-5
    df = np.full(8, 2.0)
    post, post_df = squeeze_var(var, df, outlier_p=KEEP_OWN_P)
    kinds = set()
    for i in range(8):
        s0, d0 = _prior_by_brentq(np.delete(var, i), np.delete(df, i))
        if st.f.sf(var[i] / s0, 2, d0) < 0.5:
            kinds.add("own")
            assert post_df[i] == 2 and post[i] == pytest.approx(var[i], rel=1e-9)
        else:
            kinds.add("moderated")
            assert post_df[i] == pytest.approx(d0 + 2, rel=1e-6)
            assert post[i] == pytest.approx((d0 * s0 + 2 * var[i]) / (d0 + 2), rel=1e-6)
    assert kinds == {"own", "moderated"}  # the data exercise both branches
    quiet = np.array([1e-5, 1.2e-5, 0.8e-5, 1.1e-5, 0.9e-5, 1e-5, 1.05e-5, 1e-7])
    post, post_df = squeeze_var(quiet, df, outlier_p=KEEP_OWN_P)
    assert post_df[-1] > 8 and post[-1] > 10 * quiet[-1]


def test_pooled_variance_interval_matches_scipy():
    """One unpaired row alone (no other rows: its own pooled variance, 5 df): the interval is Student's pooled t
    interval of the log medians (scipy.stats.ttest_ind with equal variances)."""
    a, b = [1.0, 1.01, 0.99, 1.005], [1.05, 1.07, 1.04]
    c = compare_ratio(a, b, 0.02)
    ci = st.ttest_ind(np.log(b), np.log(a), equal_var=True).confidence_interval(0.95)
    assert c["lo"] == pytest.approx(math.exp(ci.low)) and c["hi"] == pytest.approx(math.exp(ci.high))
    assert c["ratio"] == pytest.approx(statistics.geometric_mean(b) / statistics.geometric_mean(a))
    assert (c["n_a"], c["n_b"], c["verdict"]) == (4, 3, "slower")


def test_host_range_has_its_stated_coverage():
    """Known answer: one new capture falls inside the min-max of n captures with probability (n-1)/(n+1), whatever
    the distribution: here a heavy-tailed one (log-Cauchy, as host draws are)."""
    rng = np.random.default_rng(6)
    for n in (2, 3, 5):
        hits, trials = 0, 4000
        for _ in range(trials):
            draws = np.exp(np.clip(rng.standard_cauchy(n + 1), -300, 300))
            r = host_range(list(draws[:n]))
            hits += r["lo"] <= draws[n] <= r["hi"]
        p = (n - 1) / (n + 1)
        assert abs(hits / trials - p) <= 3 * math.sqrt(p * (1 - p) / trials), (n, hits / trials)
        assert r["coverage"] == pytest.approx(p)
    h = host_range([0.09, 0.054, 0.36])
    assert (h["center"], h["floor"], h["lo"], h["hi"]) == (0.09, 0.054, 0.054, 0.36)
    assert host_range([0.1])["lo"] is None and host_range([])["center"] is None


def test_undetermined_with_one_repeat_and_bad_threshold():
    one = compare_ratio([1.0], [1.03, 1.06, 1.0], 0.02)
    assert one["verdict"] == "inconclusive" and one["repeats_needed"] is None
    with pytest.raises(ValueError):
        compare_ratio([1.0, 1.1], [1.0, 1.2], -0.1)


def test_sitting_bound_flips_where_the_sitting_term_alone_gives_the_rule_80_percent_power():
    """Closed form, independent of the code's noncentral t: with infinitely many rounds the standard error across
    sittings is sqrt(2) * SITTING_SD, and a verdict at the 95 % level reaches 80 % power once its margin exceeds
    (z_0.975 + z_0.80) * se = (1.95996 + 0.84162) * se; just inside no number of rounds decides."""
    from attnprof.analysis.stats import SITTING_SD, sitting_bound

    sv = SITTING_SD ** 2
    edge = (1.95996 + 0.84162) * math.sqrt(2) * SITTING_SD
    assert sitting_bound(edge - 1e-4, 0.95, sv) and not sitting_bound(edge + 1e-4, 0.95, sv)
    assert not sitting_bound(0.0, 0.95, 0.0)  # one sitting never binds
