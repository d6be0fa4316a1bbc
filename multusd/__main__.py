import sys

from multusd.cli import main

sys.exit(main())
