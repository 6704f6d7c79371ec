# The pytest plugin (entry point `attncheck` in pyproject.toml; without the install: `-p attncheck.pytest_plugin`).
# --attncheck-regressions DIR (ini attncheck_regressions; default attncheck-regressions, relative to the directory
# pytest was started in) is where attncheck.check writes shrunk failures during the run, never the source tree; the
# fixture `attncheck_regressions` gives the path. Parametrisation: attncheck.golden_cases (cases.py).
import os


def pytest_addoption(parser):
    help = "directory for attncheck's shrunk failures (default: attncheck-regressions)"
    parser.getgroup("attncheck").addoption("--attncheck-regressions", default=None, metavar="DIR", help=help)
    parser.addini("attncheck_regressions", help, default="attncheck-regressions")


def _directory(config):
    d = config.getoption("attncheck_regressions") or config.getini("attncheck_regressions")
    return os.path.join(str(config.invocation_params.dir), os.path.expanduser(d))


def pytest_configure(config):
    # check() reads it when called without regressions=; xdist workers configure themselves the same way.
    os.environ["ATTNCHECK_REGRESSIONS"] = _directory(config)


def pytest_report_header(config):
    return f"attncheck: regressions to {_directory(config)}"


def _fixture():
    import pytest

    @pytest.fixture
    def attncheck_regressions(request):
        """The directory attncheck.check writes shrunk failures to in this run."""
        return _directory(request.config)

    return attncheck_regressions


attncheck_regressions = _fixture()
