import sys

from mgit.cli import main

sys.exit(main())
