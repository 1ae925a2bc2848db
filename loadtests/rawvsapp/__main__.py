"""`python -m loadtests.rawvsapp`: SGLang's own server vs the app (`loadtests.rawvsapp.run`)."""

import sys

from loadtests.rawvsapp.run import main

if __name__ == "__main__":
    sys.exit(main())
