"""``python -m casestream ...``: the ``casestream`` command line (casestream.cli)."""

from casestream.cli import main

if __name__ == "__main__":
    main(prog_name="casestream")
