"""``python -m trtcheck``: the ``trtcheck`` command, for environments where the console script is not on PATH."""

import sys

from trtcheck.tools.cli import main

sys.exit(main())
