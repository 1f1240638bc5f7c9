"""``python -m casestream.cli ...``: the ``casestream`` command line."""

from casestream.cli import main

if __name__ == "__main__":
    main(prog_name="casestream")
