"""``python -m bench.responsiveness``: the responsiveness table alone."""

import sys

from bench import responsiveness
from bench.rows import section_main

sys.exit(section_main("responsiveness", responsiveness.__doc__, "fewer repetitions", responsiveness.table))
