-- The notice document: SHA-256 (hex) of the PDF attached to the sent mail (NoticeIssued v2).
ALTER TABLE notice ADD COLUMN IF NOT EXISTS document_sha256 text
    CHECK (document_sha256 ~ '^[0-9a-f]{64}$');
