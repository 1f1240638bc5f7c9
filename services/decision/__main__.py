"""Entrypoint: ``python -m services.decision`` runs the decision service until SIGTERM/SIGINT."""

from casestream.service import run_service
from services.decision import SERVICE
from services.decision.bootstrap import build

if __name__ == "__main__":
    run_service(build, spec=SERVICE)
