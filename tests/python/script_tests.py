# Runs a plain test script's test_* functions in order (for Pythons without pytest, such as a torch venv): "ok" or
# "FAIL" with the traceback for each; exit 1 when any failed.
import sys
import traceback


def run(namespace):
    failed = 0
    for name, f in list(namespace.items()):
        if name.startswith("test_") and callable(f):
            try:
                f()
                print("ok  ", name)
            except Exception:
                failed += 1
                print("FAIL", name)
                traceback.print_exc()
    sys.exit(1 if failed else 0)
