"""``python -m session chat|serve MODULE:FACTORY``: see ``session._cli``."""

import sys

from session._cli import main

sys.exit(main())
