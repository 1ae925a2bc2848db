"""`python -m loadtests ...`: the `specflip` CLI with the tooling's subcommands, without the installed
package's entry point (a source checkout on PYTHONPATH, e.g. a bare GPU host):

    python -m loadtests models shapes --out models/shapes8b --tokenizer-from models/tiny/target
    python -m loadtests demo
"""

from __future__ import annotations

import sys

from deployments.cli import main
from loadtests.commands import register

if __name__ == "__main__":
    sys.exit(main(commands=[register]))
