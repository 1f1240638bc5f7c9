"""Entrypoint: ``python -m services.case`` runs the case service until SIGTERM/SIGINT."""

from casestream.service import run_service
from services.case import SERVICE
from services.case.bootstrap import build

if __name__ == "__main__":
    run_service(build, spec=SERVICE)
