"""Reading: bytes to lines, before anything is parsed or kept.

* :mod:`.reader`    — complete files and byte streams to lines (replay, report, and the tailers' splitting);
* :mod:`.lines`     — the line splitter: partial last lines held, overlong ones cut (``Fragment``);
* :mod:`.container` — Docker json-file and CRI records unwrapped to the server's lines;
* :mod:`.offline`   — replay/report's files as users have them: rotated generations grouped, oldest first.

It imports only the parsers (for a file's year) and the C extension ``exporter._scan``.
"""
