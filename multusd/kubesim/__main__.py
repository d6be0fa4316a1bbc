"""``python -m multusd.kubesim serve ...`` (same as ``multusd kubesim serve ...``)."""

import sys

from multusd.kubesim.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
