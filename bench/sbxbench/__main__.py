"""`python3 -m sbxbench` (from bench/) is the same as bench/sbx-bench."""
import sys

from .cli import main

sys.exit(main([sys.argv[0], *sys.argv[1:]]))
