"""`python -m vhd.cli`: the `vhd` command."""

from vhd.cli import main

if __name__ == "__main__":
    main()
