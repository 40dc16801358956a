"""The `egmstore` command of an installed egmstore (the wheel's console entry
point, pyproject.toml): execs the egmstore executable the wheel carries as
egmstore/bin/egmstore, with the same arguments, so that the process is that
executable's (its pid, signals, exit status and output). docs/install.md."""

import os
import sys


def binary():
    """Where the wheel put the egmstore executable."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "egmstore")


def main():
    path = binary()
    if not os.access(path, os.X_OK):
        sys.stderr.write(f"egmstore: error: no egmstore executable at {path}: this egmstore "
                         "package was not installed from a wheel (a build tree has it in "
                         "<build>/bin/egmstore)\n")
        return 2
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(path, ["egmstore", *sys.argv[1:]])
    return 2  # not reached: execv returns only by raising


if __name__ == "__main__":
    sys.exit(main())
