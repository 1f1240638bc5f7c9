"""Entrypoint: ``python -m services.notification`` runs the notification service."""

from casestream.service import run_service
from services.notification import SERVICE
from services.notification.bootstrap import build

if __name__ == "__main__":
    run_service(build, spec=SERVICE)
