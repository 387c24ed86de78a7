"""Sources: the live side of ``serve``, files that grow, rotate and truncate, stdin, and their positions.

They drive the state stage's pipeline (the tailers feed it lines, recovery reads a boot back through a
scratch one), so they import it: in the import order they stand after the state, before the diagnosis.
:mod:`.kubernetes` finds the container logs of a DaemonSet; :mod:`.missing` the --log paths that never appear.
"""

from .manager import Manager
from .positions import Positions
from .stdin import StdinSource
from .tailer import Tailer

__all__ = ["Manager", "Positions", "StdinSource", "Tailer"]
