"""``python -m controller`` is the ``cubicle`` command."""

from .cli import main

main()
