"""``python -m gvr_reference.realgen``: see :mod:`gvr_reference.realgen.cli`."""

import sys

from .cli import main

sys.exit(main())
