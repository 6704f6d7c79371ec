# `python -m attncheck ARGS` runs the attncheck executable (attncheck._cli.exe() says which one).
from ._cli import main

main()
