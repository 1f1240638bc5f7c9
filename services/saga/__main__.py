"""Entrypoint: ``python -m services.saga`` runs the saga-orchestrator until SIGTERM/SIGINT."""

from casestream.service import run_service
from services.saga import SERVICE
from services.saga.bootstrap import build

if __name__ == "__main__":
    run_service(build, spec=SERVICE)
