"""Bearer-token (JWT) authentication: settings, verification, the principal, local minting.

Public API::

    from casestream.auth import AuthSettings, TokenVerifier, Principal, mint_token, dev_token

Module: ``tokens`` (all of it; see its docstring for claims and keys).
"""

from casestream.auth.tokens import (
    DEFAULT_AUDIENCE,
    DEV_ISSUER,
    DEV_JWT_KEY,
    DEV_KEY_FINGERPRINT,
    HMAC_MIN_KEY_BYTES,
    ROLE_OFFICER,
    ROLE_OPERATOR,
    ROLE_SUPERVISOR,
    ROLES,
    SUBJECT_PATTERN,
    TENANT_PATTERN,
    AccessDenied,
    AuthError,
    AuthSettings,
    InvalidToken,
    Principal,
    TokenVerifier,
    bearer_headers,
    dev_token,
    key_fingerprint,
    mint_token,
    principal_from_claims,
)

__all__ = [
    "DEFAULT_AUDIENCE", "DEV_ISSUER", "DEV_JWT_KEY", "DEV_KEY_FINGERPRINT", "HMAC_MIN_KEY_BYTES", "ROLES", "ROLE_OFFICER",
    "ROLE_OPERATOR", "ROLE_SUPERVISOR", "SUBJECT_PATTERN", "TENANT_PATTERN", "AccessDenied", "AuthError",
    "AuthSettings", "InvalidToken", "Principal", "TokenVerifier", "bearer_headers", "dev_token",
    "key_fingerprint", "mint_token", "principal_from_claims",
]
