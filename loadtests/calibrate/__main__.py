"""`python -m loadtests.calibrate`: a client's ceiling against the null server (`loadtests.calibrate.run`)."""

import sys

from loadtests.calibrate.run import main

if __name__ == "__main__":
    sys.exit(main())
