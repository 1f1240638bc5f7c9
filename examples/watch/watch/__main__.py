"""Entrypoint: ``python -m watch`` runs the watch service until SIGTERM/SIGINT."""

from casestream.service import run_service
from watch.bootstrap import build

if __name__ == "__main__":
    run_service(build)
