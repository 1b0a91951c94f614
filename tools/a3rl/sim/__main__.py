"""``python -m a3rl.sim ARGS``: the simulator's commands (``a3rl sim``, ``a3rl demo``)."""

import sys

from a3rl.sim.cli import main

sys.exit(main())
