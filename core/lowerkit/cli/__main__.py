"""``python -m lowerkit.cli``."""

import sys

from . import main

sys.exit(main())
