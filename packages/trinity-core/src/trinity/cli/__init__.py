"""The ``trinity`` command line (``trinity = trinity.cli:main``, ``python -m trinity.cli``) and
the back-ends only it uses."""

from trinity.cli.commands import main

__all__ = ["main"]
