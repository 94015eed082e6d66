"""The files here are a family and its test as a contributor writes them, for tests/test_add_family.py to drop into
a copy of the tree (vhd/mechanisms/assignment.py, tests/mechanisms/test_assignment.py); here they are data, not tests:
this tree has no `assignment` family to test."""

collect_ignore = ["assignment.py", "test_assignment.py"]
