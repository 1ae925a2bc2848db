"""`python -m deployments ...` = the `specflip` command."""

import sys

from deployments.cli import main

sys.exit(main())
