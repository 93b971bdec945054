"""pytest setup for the Python package's tests (scripts/test-python runs them): the package
comes from the build tree (PYTHONPATH=build/release/python) or an installed wheel, and the
program is the one inside it."""
import os
import pathlib
import subprocess
import sys

import pytest

import fp8lm.__main__

REPO = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def fp8lm_bin():
    """The fp8lm program inside the package under test."""
    path = fp8lm.__main__.program()
    assert os.access(path, os.X_OK), path
    return path


@pytest.fixture(scope="session")
def run_cli(fp8lm_bin):
    def run(*args, check=True, **kwargs):
        r = subprocess.run([fp8lm_bin, *map(str, args)], capture_output=True, text=True,
                           **kwargs)
        if check and r.returncode != 0:
            raise AssertionError(f"fp8lm {' '.join(map(str, args))}: {r.stderr}")
        return r
    return run


def pytest_report_header(config):
    return [f"fp8lm {fp8lm.__version__} from {os.path.dirname(fp8lm.__file__)}",
            f"python {sys.version.split()[0]}"]
