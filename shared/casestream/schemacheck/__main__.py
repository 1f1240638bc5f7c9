"""``python -m casestream.schemacheck check|register``: the schemas CLI without the casestream entry point."""

from casestream.cli.schemas import main

if __name__ == "__main__":
    main()
