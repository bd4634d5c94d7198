"""The ``graphsub`` command line: a thin layer over the library, one module per command group.

:mod:`.app` assembles the application; :mod:`.common` holds what every command shares (consoles, exit
codes, options, model loading).  The library never imports this package.
"""

from graphsub.cli.app import app, main

__all__ = ["app", "main"]
