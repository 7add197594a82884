import sys

# While ``python -m translate.<command>`` locates its module, sys.argv[0] is "-m" (Python's
# documented behaviour): this package is then the command's first import.
if sys.argv[:1] == ["-m"]:
    from translate.errors import stop_in_one_line_while_starting

    stop_in_one_line_while_starting()
