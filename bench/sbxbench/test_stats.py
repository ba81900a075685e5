"""Statistics against hand-computed answers (bench/sbxbench/stats.py)."""

import random
import unittest

from sbxbench import stats


class PercentileTest(unittest.TestCase):
    def test_type7_hand_computed(self):
        ten = list(range(1, 11))
        # h = (n - 1) p: p5 -> h = 0.45 -> 1 + 0.45 * (2 - 1); p95 -> h = 8.55 -> 9 + 0.55.
        self.assertAlmostEqual(stats.percentile(ten, 0.05), 1.45)
        self.assertAlmostEqual(stats.percentile(ten, 0.95), 9.55)
        self.assertAlmostEqual(stats.median(ten), 5.5)
        # h = 4 * 0.4 = 1.6 -> 20 + 0.6 * (35 - 20) = 29 (numpy.percentile gives 29 too).
        self.assertAlmostEqual(stats.percentile([15, 20, 35, 40, 50], 0.4), 29.0)
        self.assertAlmostEqual(stats.percentile([3, 1, 2], 0.25), 1.5)  # unsorted input
        self.assertEqual(stats.percentile([3, 1, 2], 0.0), 1)
        self.assertEqual(stats.percentile([3, 1, 2], 1.0), 3)

    def test_rejects_empty_and_bad_p(self):
        with self.assertRaises(ValueError):
            stats.percentile([], 0.5)
        with self.assertRaises(ValueError):
            stats.percentile([1.0], 1.5)


class SummaryTest(unittest.TestCase):
    def test_known_sample(self):
        s = stats.summarize([4.0, 1.0, 3.0, 2.0], resamples=100)
        self.assertEqual((s.n, s.median, s.min, s.max, s.mean), (4, 2.5, 1.0, 4.0, 2.5))
        self.assertAlmostEqual(s.p5, 1.15)   # h = 0.15
        self.assertAlmostEqual(s.p95, 3.85)  # h = 2.85
        lo, hi = s.median_ci
        self.assertTrue(1.0 <= lo <= s.median <= hi <= 4.0)

    def test_n1_is_degenerate_not_an_error(self):
        s = stats.summarize([7.5])
        self.assertEqual((s.n, s.median, s.p5, s.p95, s.min, s.max, s.mean), (1, 7.5, 7.5, 7.5, 7.5, 7.5, 7.5))
        self.assertEqual(s.median_ci, (7.5, 7.5))

    def test_n2(self):
        s = stats.summarize([10.0, 20.0], resamples=2000)
        self.assertEqual(s.median, 15.0)
        self.assertAlmostEqual(s.p5, 10.5)
        self.assertAlmostEqual(s.p95, 19.5)
        # Resampled medians are 10, 15 or 20 with probability 1/4, 1/2, 1/4.
        self.assertEqual(s.median_ci, (10.0, 20.0))

    def test_empty(self):
        s = stats.summarize([])
        self.assertEqual(s.n, 0)
        self.assertIsNone(s.median)
        self.assertIsNone(s.median_ci)
        self.assertEqual(s.as_dict()["median_ci"], None)

    def test_no_resamples_means_no_interval(self):
        self.assertIsNone(stats.summarize([1.0, 2.0, 3.0], resamples=0).median_ci)
        self.assertIsNone(stats.ratio_of_medians([2.0, 3.0], [1.0, 2.0], resamples=0).ci)


class BootstrapTest(unittest.TestCase):
    def test_three_values_analytic(self):
        # Medians of resamples of [1, 2, 3]: P(1) = P(3) = 7/27 ~ 0.259, P(2) = 13/27.
        # 95 %: the 2.5th and 97.5th percentiles fall on 1 and 3.
        self.assertEqual(stats.bootstrap_median_ci([1, 2, 3], resamples=10000), (1.0, 3.0))
        # 40 %: the 30th and 70th percentiles both fall on 2 (0.259 < 0.3, 0.741 > 0.7).
        self.assertEqual(stats.bootstrap_median_ci([1, 2, 3], resamples=10000, confidence=0.4), (2.0, 2.0))

    def test_tiny_fixed_seed_case_by_hand(self):
        # B = 4 resamples of [10, 20, 30] with the documented generator; the CI ends are the
        # type-7 2.5th / 97.5th percentiles of the 4 sorted resample medians.
        rng = stats.seeded_rng(5, "tiny")
        medians = sorted(sorted(rng.choices([10, 20, 30], k=3))[1] for _ in range(4))
        h_lo, h_hi = 3 * 0.025, 3 * 0.975
        want = (medians[0] + h_lo * (medians[1] - medians[0]),
                medians[2] + (h_hi - 2) * (medians[3] - medians[2]))
        got = stats.bootstrap_median_ci([10, 20, 30], resamples=4, seed=5, label="tiny")
        self.assertAlmostEqual(got[0], want[0])
        self.assertAlmostEqual(got[1], want[1])

    def test_reproducible_and_seed_dependent(self):
        gen = random.Random(1)
        xs = [gen.gauss(100, 10) for _ in range(15)]
        a = stats.bootstrap_median_ci(xs, resamples=500, seed=3, label="x")
        self.assertEqual(a, stats.bootstrap_median_ci(xs, resamples=500, seed=3, label="x"))
        self.assertNotEqual(a, stats.bootstrap_median_ci(xs, resamples=500, seed=4, label="x"))

    def test_ratio_ci_contains_true_ratio_for_separated_samples(self):
        gen = random.Random(2)
        fast = [100 + gen.uniform(-3, 3) for _ in range(12)]
        slow = [200 + gen.uniform(-6, 6) for _ in range(12)]
        r = stats.ratio_of_medians(slow, fast, resamples=3000)
        self.assertAlmostEqual(r.ratio, 2.0, delta=0.1)
        lo, hi = r.ci
        self.assertTrue(lo <= 2.0 <= hi, r)
        self.assertGreater(lo, 1.5)  # clearly not "the same"
        self.assertEqual((r.n_numerator, r.n_denominator), (12, 12))

    def test_ratio_n1_and_zero(self):
        r = stats.ratio_of_medians([30.0], [10.0])
        self.assertEqual((r.ratio, r.ci), (3.0, (3.0, 3.0)))
        self.assertIsNone(stats.ratio_of_medians([1.0], [0.0]).ratio)
        empty = stats.ratio_of_medians([], [1.0])
        self.assertEqual((empty.ratio, empty.ci), (None, None))


if __name__ == "__main__":
    unittest.main()
