"""Entrypoint: ``python -m services.audit`` runs the audit service until SIGTERM/SIGINT."""

from casestream.service import run_service
from services.audit import SERVICE
from services.audit.bootstrap import build

if __name__ == "__main__":
    run_service(build, spec=SERVICE)
