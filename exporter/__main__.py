"""``python -m exporter`` = the ``hybrid-cache-exporter`` command."""

import sys

from .cli import main

sys.exit(main())
