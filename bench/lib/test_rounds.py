import unittest

from .rounds import rotated, round_order


class RotatedTest(unittest.TestCase):
    def test_rotation(self):
        self.assertEqual(rotated(["a", "b", "c"], 1), ["b", "c", "a"])
        self.assertEqual(rotated(("a", "b", "c"), 0), ["a", "b", "c"])

    def test_offset_wraps_around(self):
        # envoy.py rotates by the round index, cluster.py alternates two layouts.
        self.assertEqual(rotated(["a", "b", "c"], 4), ["b", "c", "a"])
        self.assertEqual([rotated((1, 3), r) for r in range(3)], [[1, 3], [3, 1], [1, 3]])

    def test_no_units(self):
        self.assertEqual(rotated([], 3), [])


class RoundOrderTest(unittest.TestCase):
    def test_every_unit_once_per_round(self):
        units = list(range(7))
        for round_index in range(3):
            self.assertEqual(sorted(round_order(units, round_index, 3)), units)

    def test_starts_move_through_the_list(self):
        units = list(range(6))
        firsts = [round_order(units, r, 3)[0] for r in range(3)]
        self.assertEqual(firsts, [0, 2, 4])

    def test_first_round_keeps_the_order(self):
        self.assertEqual(round_order(["x", "y"], 0, 5), ["x", "y"])

    def test_zero_rounds_does_not_divide_by_zero(self):
        self.assertEqual(round_order(["x", "y"], 0, 0), ["x", "y"])


if __name__ == "__main__":
    unittest.main()
