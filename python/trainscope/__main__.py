"""`python -m trainscope ARGS`: the same as the `trainscope ARGS` command."""

import sys

from trainscope import main

sys.exit(main())
