"""`python -m loadtests.sweep`: the sweep (`loadtests.sweep.run`)."""

import sys

from loadtests.sweep.run import main

if __name__ == "__main__":
    sys.exit(main())
