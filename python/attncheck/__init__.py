# attncheck for Python kernels: the fp64 reference, fixtures as dicts of numpy arrays, compare, the property suite
# with shrinking against a Python callable (check), and worker.serve for `attncheck verify --worker`.
# It drives the attncheck executable (docs/python.md says why); numpy is required, h5py for fixtures.
from . import worker
from .cases import golden_cases
from .check import check, check_gradients
from .compare import Result, compare
from .fixture import load, make_fixture, reference, save, tolerance
from .module import check_module, check_module_function, compare_module, import_module

__all__ = ["check", "check_gradients", "golden_cases", "compare", "load", "make_fixture", "reference", "save", "tolerance", "worker",
           "Result", "check_module", "check_module_function", "compare_module", "import_module"]
