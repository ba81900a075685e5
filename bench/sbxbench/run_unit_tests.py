#!/usr/bin/python3
"""Runs sbx-bench's unit tests (test_*.py here) for meson's suite 'unit'
(bench/meson.build); the same as `cd bench && python3 -m unittest`."""
import os
import sys
import unittest

sys.dont_write_bytecode = True
bench = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
sys.path.insert(0, bench)
suite = unittest.defaultTestLoader.discover(os.path.join(bench, "sbxbench"), top_level_dir=bench)
result = unittest.TextTestRunner(verbosity=2).run(suite)
sys.exit(0 if result.wasSuccessful() else 1)
