"""``python -m cognitive.bench``: see ``cognitive.bench`` and ``python -m cognitive.bench --help``."""

import sys

from cognitive.bench._cli import main

sys.exit(main())
