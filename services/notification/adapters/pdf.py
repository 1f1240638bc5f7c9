"""The notice document: a one-page PDF rendered with reportlab.

Deterministic: the same notice gives the same bytes (reportlab's ``invariant`` mode fixes
the creation date and document id; the date printed is the notice's ``created_at``), so
a re-send after a crash carries the same document and the same SHA-256 as the first send.
"""

from __future__ import annotations

import io

from reportlab.lib.pagesizes import A4
from reportlab.lib.units import mm
from reportlab.pdfgen.canvas import Canvas

from services.notification.domain.notice import Notice, NoticeKind, message_id_for, penalty_text


def render_notice_pdf(notice: Notice) -> bytes:
    """The PDF of ``notice`` (bytes, starting ``%PDF-``): case, violation, penalty, reason;
    for a CORRECTION the correction notice (the corrected notice's Message-ID, the reason,
    the corrected penalty)."""
    buf = io.BytesIO()
    pdf = Canvas(buf, pagesize=A4, invariant=1)
    correction = notice.kind is NoticeKind.CORRECTION
    title = "Correction notice" if correction else "Notice of violation"
    pdf.setTitle(f"{title} {notice.violation_code} - case {notice.case_id}".replace("  ", " "))
    pdf.setAuthor("casestream notification service")
    width, height = A4
    y = height - 30 * mm
    pdf.setFont("Helvetica-Bold", 16)
    pdf.drawString(25 * mm, y, title)
    pdf.setFont("Helvetica", 11)
    lines = [
        f"Case: {notice.case_id}",
        f"Recipient: {notice.recipient_email}",
        f"Date: {notice.created_at.date().isoformat()}",
        f"Corrects the notice: {message_id_for(notice.case_id)} (it stays on record)",
        f"Reason: {notice.reason or ''}"[:110],
        f"Corrected penalty: {penalty_text(notice.penalty_cents)}",
        "",
        f"Reference (Message-ID): {notice.message_id}",
    ] if correction else [
        f"Case: {notice.case_id}",
        f"Recipient: {notice.recipient_email}",
        f"Date: {notice.created_at.date().isoformat()}",
        f"Violation: {notice.violation_code}",
        f"Penalty: {penalty_text(notice.penalty_cents)}",
        "",
        "You may appeal this decision within 30 days of the case being closed.",
        f"Reference (Message-ID): {notice.message_id}",
    ]
    for line in lines:
        y -= 8 * mm
        pdf.drawString(25 * mm, y, line)
    pdf.showPage()
    pdf.save()
    return buf.getvalue()
