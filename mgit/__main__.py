import sys

from mgit import _crashpoints

_crashpoints.install()  # crash tests only (MGIT_CRASH_AT); nothing happens when unset

from mgit.cli import main  # noqa: E402

sys.exit(main())
