"""attnprof.analysis.stats: the between-run interval and the change verdict, against independent arithmetic and against
data with a known answer (simulated repeats, fixed seeds: deterministic)."""
import math
import statistics

import numpy as np
import pytest
from scipy import stats as st

from attnprof.analysis.stats import MEDIAN_VARIANCE, between_run_interval, compare_ratio


def test_interval_worked_by_hand():
    m = [1.00, 1.02, 0.97]  # median 1.00, mean 0.9967: they differ, so a mix-up of the two shows
    r = between_run_interval(m)
    logs = [math.log(x) for x in m]
    mean, sd = statistics.fmean(logs), statistics.stdev(logs)
    half = 4.302652729749464 * sd * math.sqrt((1 + math.pi / 2) / 3)  # t_{0.975, 2} from a table
    assert r["n"] == 3 and r["center"] == 1.00 and r["rel_sd"] == pytest.approx(sd)
    assert r["lo"] == pytest.approx(math.exp(mean - half)) and r["hi"] == pytest.approx(math.exp(mean + half))


def test_even_count_states_the_mean_of_the_middle_two_and_one_repeat_has_no_interval():
    assert between_run_interval([4.0, 1.0, 2.0, 3.0])["center"] == 2.5
    assert between_run_interval([2.0, float("nan"), None]) == {"n": 1, "center": 2.0, "lo": None, "hi": None, "rel_sd": None}
    assert between_run_interval([])["center"] is None
    with pytest.raises(ValueError, match="positive"):
        between_run_interval([1.0, 0.0])


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


def test_welch_interval_matches_scipy():
    a, b = [1.0, 1.01, 0.99, 1.005], [1.05, 1.07, 1.04]
    c = compare_ratio(a, b, 0.02)
    ci = st.ttest_ind(np.log(b), np.log(a), equal_var=False).confidence_interval(0.95)
    assert c["lo"] == pytest.approx(math.exp(ci.low)) and c["hi"] == pytest.approx(math.exp(ci.high))
    assert c["ratio"] == pytest.approx(statistics.geometric_mean(b) / statistics.geometric_mean(a))
    assert (c["n_a"], c["n_b"], c["verdict"]) == (4, 3, "slower")


def test_a_a_simulation_gives_few_changed_verdicts():
    """Known answer: no change. Two result sets of 3 repeats from one distribution (3 % between runs): with a
    2 % practical threshold 'changed' must stay rare (below the 5 % the interval alone would allow)."""
    rng = np.random.default_rng(7)
    verdicts = [compare_ratio(list(np.exp(rng.normal(0, 0.03, 3))), list(np.exp(rng.normal(0, 0.03, 3))), 0.02)["verdict"]
                for _ in range(2000)]
    changed = sum(v in ("slower", "faster") for v in verdicts) / len(verdicts)
    assert changed <= 0.05, changed


def test_an_injected_change_is_found_with_the_right_size():
    """Known answer: b is 5 % slower than a, 0.5 % noise, 5 repeats each: found as slower in almost every trial,
    and the interval holds 1.05 about 95 % of the time."""
    rng = np.random.default_rng(11)
    found = covered = 0
    trials = 1000
    for _ in range(trials):
        c = compare_ratio(list(np.exp(rng.normal(0, 0.005, 5))), list(1.05 * np.exp(rng.normal(0, 0.005, 5))), 0.02)
        found += c["verdict"] == "slower"
        covered += c["lo"] <= 1.05 <= c["hi"]
    assert found / trials >= 0.99 and 0.92 <= covered / trials <= 0.98, (found, covered)


def test_inconclusive_says_how_many_repeats_would_decide():
    # a 3 % change whose interval still reaches 1: more repeats at the same spread would find it
    a, b = [1.0, 1.03, 0.97], [1.03, 1.06, 1.0]
    c = compare_ratio(a, b, 0.02)
    assert c["verdict"] == "inconclusive" and c["repeats_needed"] > 3
    # with that many repeats (the same spread), the verdict is decided
    n = c["repeats_needed"]
    grid = np.linspace(-1, 1, n)
    a2 = list(np.exp(grid * statistics.stdev(np.log(a)) / statistics.stdev(grid)))  # a's spread of log medians
    b2 = [x * c["ratio"] for x in a2]
    assert compare_ratio(a2, b2, 0.02)["verdict"] == "slower"
    # one repeat on a side: no spread, no suggestion
    one = compare_ratio([1.0], b, 0.02)
    assert one["verdict"] == "inconclusive" and one["repeats_needed"] is None
    with pytest.raises(ValueError):
        compare_ratio(a, b, -0.1)
