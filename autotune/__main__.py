import sys

from autotune.cli.main import main

sys.exit(main())
