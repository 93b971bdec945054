"""`python -m fp8lm ARGS` (and the `fp8lm` command pip installs): the command-line tool that
ships inside the package, run with these arguments."""
import os
import sys


def program():
    """The fp8lm program inside this package."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "fp8lm")


def main():
    path = program()
    if not os.access(path, os.X_OK):
        sys.exit(f"error: {path}: the fp8lm program is missing from this installation")
    sys.stdout.flush()
    os.execv(path, ["fp8lm"] + sys.argv[1:])


if __name__ == "__main__":
    main()
