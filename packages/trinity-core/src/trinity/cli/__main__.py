"""``python -m trinity.cli``: how the studio and the tests start the command line."""

from trinity.cli.commands import main

main()
