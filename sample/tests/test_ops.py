import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from calc import add, sub, mul, div  # noqa: E402


class OpsTest(unittest.TestCase):
    def test_add(self):
        self.assertEqual(add(2, 3), 5)

    def test_sub(self):
        self.assertEqual(sub(2, 3), -1)

    def test_mul(self):
        self.assertEqual(mul(4, 3), 12)

    def test_div(self):
        self.assertEqual(div(6, 3), 2)
        with self.assertRaises(ZeroDivisionError):
            div(1, 0)


if __name__ == "__main__":
    unittest.main()
