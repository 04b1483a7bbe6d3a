"""``python -m bertembed``: the same as the ``bertembed`` command."""

import sys

from ._cli.parser import main

if __name__ == "__main__":
    sys.exit(main())
