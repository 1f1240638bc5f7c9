"""Entrypoint: ``python -m watch`` runs the watch service until SIGTERM/SIGINT."""

from casestream.service import run_service
from watch import SERVICE
from watch.bootstrap import build

if __name__ == "__main__":
    run_service(build, spec=SERVICE)
