"""Log sources for ``serve``: tailed files (with rotation, truncation and positions) and stdin."""

from .manager import Manager
from .positions import Positions
from .stdin import StdinSource
from .tailer import Tailer

__all__ = ["Manager", "Positions", "StdinSource", "Tailer"]
